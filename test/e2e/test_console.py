"""Issue 21: the admin console (GET /console) in a real browser. Debian's headless chromium,
driven by chromedriver through python3-selenium, against the real gateway on a real PostgreSQL
with the provider simulator (the e2e harness). Not skipped when the browser is missing: it is a
test dependency (deploy/install-deps.sh), so a machine without it fails here.

The walk: a wrong admin token is refused on screen; sign in; create a tenant, unlock the unified
API and enable SMS; set its webhook (secret shown once); create a token and read it once; send a
message with it through the API; find it in the unified log by number and open its timeline;
retry its webhook delivery; revoke the token and see the next send refused (401). Queued,
scheduled, canceled and expired messages (API.md §19): their badges, the status filter, and
each message's queued life. Inbound messages, a recipient's page and the suppressions (API.md
§21). The usage charts of every tenant and of one (API.md §22). Screenshots at 375 and 1280 px
wide go to test/e2e/screenshots/.
Throughout, the page must make no request to another origin (chromium's performance log), set no
cookie, and the admin token must never appear in a URL or in the gateway's access log."""

import datetime
import decimal
import json
import math
import os
import re
import time
import urllib.parse

import pytest
from selenium import webdriver
from selenium.common.exceptions import (ElementClickInterceptedException, ElementNotInteractableException,
                                        NoAlertPresentException, NoSuchElementException,
                                        StaleElementReferenceException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import ROOT, assert_ok, wait_for
from gwlib import (ADMIN_TOKEN, META_TOKEN, SETTINGS_ALL, WA_FROM, add_tenant, call, linked_gateway,  # noqa: F401
                   make_gateway, new_tenant, new_token, provider_env, query_url, sim)
from test_costs import put_card
from test_inbound import META_PNID, SETTINGS as IN_SETTINGS, meta_message, post_meta, post_twilio_in, post_waha, waha_message
from test_queue import META_ID, iso, message, tenant_with, until_status
from test_webhooks_out import WH_ENV, rx  # noqa: F401

SHOTS = os.path.join(ROOT, "test", "e2e", "screenshots")
TO = "+6281234500077"
WAIT = 15


@pytest.fixture
def gateway(make_gateway, sim):
    sim.clear()
    srv = make_gateway(workers=1, env=provider_env(sim, dict(WH_ENV, OMNIGATE_ATTEMPT_TIMEOUT_MS="2000")))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    return srv


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--no-first-run", "--no-default-browser-check", "--disable-extensions",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-features=Translate,OptimizationHints,MediaRouter",
              "--user-data-dir=" + str(tmp_path / "profile"), "--window-size=1280,900"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    d.set_page_load_timeout(30)
    d.perf = []  # every performance log entry read so far (the log is drained on each read)
    yield d
    d.quit()


# ---- helpers --------------------------------------------------------------------------------------------

def perf(d):
    """The Network events chromium logged, accumulated over the test."""
    for e in d.get_log("performance"):
        d.perf.append(json.loads(e["message"])["message"])
    return d.perf


def wait(d, cond, timeout=WAIT):
    return WebDriverWait(d, timeout).until(cond)


def visible(d, css):
    return wait(d, EC.visibility_of_element_located((By.CSS_SELECTOR, css)))


class click:
    """Clicks `css` once it is there and clickable, looking it up again if the page replaced it
    in between (a list re-rendered by an answer that arrived meanwhile)."""

    def __init__(self, d, css):
        def attempt(drv):
            drv.find_element(By.CSS_SELECTOR, css).click()
            return True
        WebDriverWait(d, WAIT, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException,
                                                   ElementNotInteractableException,
                                                   ElementClickInterceptedException)).until(attempt)


def fill(d, css, text):
    e = visible(d, css)
    e.clear()
    e.send_keys(text)
    return e


def shot(d, name, width):
    """A screenshot of the whole page at `width` CSS pixels (the device metrics set exactly, so
    the page's media queries see that width)."""
    os.makedirs(SHOTS, exist_ok=True)
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
    height = d.execute_script("return Math.max(document.documentElement.scrollHeight, 900)")
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": min(height, 4000), "deviceScaleFactor": 1, "mobile": width < 600})
    path = os.path.join(SHOTS, "%s-%d.png" % (name, width))
    d.save_screenshot(path)
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert os.path.getsize(path) > 1000
    return path


def texts(d, css):
    """The text of each element `css` matches, read in one script (rows a page replaces while
    they are read would otherwise be stale); for table rows, the first cell's."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(function (e) { return (e.cells ? e.cells[0] : e).textContent; })", css)


def send(srv, token):
    return call(srv, "POST", "/api/omni/send", token=token, body={"to": TO, "text": "hello from the console test",
                                                                 "channels": ["sms"]})


def dialog_terms(d):
    """The open timeline's first term list as [(term, value)], read in one script."""
    return [tuple(p) for p in d.execute_script("""
        var dl = document.querySelector('#timeline-body dl');
        return Array.from(dl.querySelectorAll('dt')).map(function (t) {
          return [t.textContent, t.nextElementSibling.textContent]; });""")]


def accept_confirm(d):
    def alert(drv):
        try:
            return drv.switch_to.alert
        except NoAlertPresentException:
            return False
    wait(d, alert).accept()


# ---- the walk -------------------------------------------------------------------------------------------

def test_console_walkthrough(gateway, browser, rx):
    """Sign in (wrong token refused), create and set up a tenant, create a token shown once, send with
    it, find the message in the unified log by number, open its timeline, revoke the token and see
    the next send refused; screenshots at 375 and 1280 px; no other origin, no cookie, the admin
    token in no URL and no access log line."""
    srv, d = gateway, browser
    call(srv, "POST", "/admin/tenants", token=ADMIN_TOKEN, body={"name": "Another tenant"})
    origin = "http://127.0.0.1:%d" % srv.port
    d.get(origin + "/console")
    assert d.title == "Omnigate console"

    # A wrong token is refused, on screen, and not kept.
    fill(d, "#signin-token", "not-the-admin-token")
    click(d, "#signin-form button[type=submit]")
    err = visible(d, "#signin-error")
    wait(d, lambda _: "Wrong admin token" in err.text)
    assert d.execute_script("return sessionStorage.length") == 0

    # The right one, typed and submitted with the keyboard.
    fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
    visible(d, "#tenants")
    assert d.execute_script("return sessionStorage.getItem('omnigate.adminToken')") == ADMIN_TOKEN
    assert d.execute_script("return localStorage.length") == 0

    # Create a tenant (locked by default).
    d.find_element(By.CSS_SELECTOR, "#create-tenant summary").click()
    fill(d, "#create-name", "Console Shop")
    click(d, "#create-form button[type=submit]")
    visible(d, "#tenant")
    wait(d, lambda _: d.find_element(By.ID, "tenant-h").text == "Console Shop")
    tenant_id = d.find_element(By.ID, "tenant-id").text
    assert len(tenant_id) == 36

    # A validation error from the API is shown next to its field.
    fill(d, "#set-sms-senders", "ACME")
    fill(d, "#set-sms-default", "NOTLISTED")
    click(d, "#settings-form button[type=submit]")
    field_err = visible(d, "[data-field='settings.channels.sms.defaultSender'] .field-error")
    assert "defaultSender" in field_err.text
    assert d.find_element(By.ID, "set-sms-default").get_attribute("aria-invalid") == "true"

    # Unlock the unified API, enable SMS with its sender, set a rate limit; save.
    fill(d, "#set-sms-default", "ACME")
    d.find_element(By.ID, "set-unified").click()
    d.find_element(By.ID, "set-sms-enabled").click()
    fill(d, "#set-rate", "50")
    click(d, "#settings-form button[type=submit]")
    wait(d, lambda _: "Settings saved" in d.find_element(By.ID, "status").text)
    t = assert_ok(call(srv, "GET", "/admin/tenants/" + tenant_id, token=ADMIN_TOKEN))["data"]
    assert t["unifiedApiEnabled"] is True
    assert t["settings"]["channels"]["sms"] == {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"}
    assert t["settings"]["rateLimitPerSecond"] == 50
    shot(d, "settings", 1280)
    shot(d, "settings", 375)

    # The tenant list finds it by part of its name, in any case.
    click(d, "#tenant-back")
    fill(d, "#search-name", "console sh").send_keys(Keys.ENTER)
    wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["Console Shop"])
    click(d, "#tenant-table tbody tr button")
    visible(d, "#tenant")

    # The webhook: a bad URL is refused next to its field; a good one shows its secret once.
    click(d, ".tab[data-tab=webhook]")
    wait(d, lambda _: "No webhook yet" in d.find_element(By.ID, "webhook-state").text)
    fill(d, "#webhook-url", "ftp://example.com/hook")
    click(d, "#webhook-form button[type=submit]")
    url_err = visible(d, "[data-field=url] .field-error")
    assert url_err.text
    fill(d, "#webhook-url", rx.url())
    d.find_element(By.ID, "event-message-sent").click()
    click(d, "#webhook-form button[type=submit]")
    secret = visible(d, "#secret-value")
    wait(d, lambda _: secret.get_attribute("value").startswith("whsec_"))
    assert "****" in d.find_element(By.ID, "webhook-state").text
    click(d, "#secret-done")
    wh = assert_ok(call(srv, "GET", "/admin/tenants/%s/webhook" % tenant_id, token=ADMIN_TOKEN))["data"]
    assert wh["url"] == rx.url() and wh["events"] == ["message.sent"]

    # A token, shown once with a copy button.
    click(d, ".tab[data-tab=tokens]")
    fill(d, "#token-name", "browser")
    click(d, "#token-form button[type=submit]")
    value = visible(d, "#token-value")
    wait(d, lambda _: value.get_attribute("value").startswith("kft_"))
    token = value.get_attribute("value")
    assert d.find_element(By.CSS_SELECTOR, "#token-once .copy").is_displayed()
    wait(d, lambda _: "browser" in d.find_element(By.ID, "token-table").text)
    shot(d, "token", 375)
    click(d, "#token-done")
    assert d.find_element(By.ID, "token-value").get_attribute("value") == ""
    assert token not in d.find_element(By.TAG_NAME, "body").text  # the list shows its prefix only

    # A message sent with that token through the API.
    r = send(srv, token)
    sent = assert_ok(r)["data"]
    assert sent["winningChannel"] == "sms"

    # Found in the unified log by number; its timeline.
    click(d, ".tab[data-tab=logs]")
    Select(visible(d, "#log-kind")).select_by_value("omni")
    fill(d, "#log-to", TO)
    click(d, "#logs-form button[type=submit]")
    wait(d, lambda _: sent["reference"] in d.find_element(By.ID, "log-table").text)
    rows = d.find_elements(By.CSS_SELECTOR, "#log-table tbody tr")
    assert len(rows) == 1
    click(d, "#log-table tbody tr td.actions button")
    dialog = visible(d, "#timeline")
    wait(d, lambda _: "sms: sent" in dialog.text)
    assert "Latency" in dialog.text and "Delivery status" in dialog.text
    # A sync send: no priority, due time, validity nor queued life (API.md §19's fields are null).
    assert [t for t, _ in dialog_terms(d)] == ["Status", "Mode", "Winning channel", "Created", "Completed", "Text"]
    assert d.find_elements(By.CSS_SELECTOR, "#timeline-body .life") == [] and "Throttled" not in dialog.text
    shot(d, "timeline", 1280)
    shot(d, "timeline", 375)
    d.find_element(By.ID, "timeline-close").send_keys(Keys.ENTER)
    wait(d, lambda _: not d.find_element(By.ID, "timeline").is_displayed())
    shot(d, "logs", 1280)
    shot(d, "logs", 375)

    # Its webhook delivery, retried from the deliveries log.
    assert wait_for(lambda: len(rx.got()) == 1, 10)
    Select(visible(d, "#log-kind")).select_by_value("deliveries")
    assert not d.find_element(By.ID, "log-to").is_displayed()
    click(d, "#logs-form button[type=submit]")
    wait(d, lambda _: "message.sent" in d.find_element(By.ID, "log-table").text)
    click(d, "#log-table tbody tr button:nth-of-type(2)")
    wait(d, lambda _: "queued" in d.find_element(By.ID, "status").text)
    assert wait_for(lambda: len(rx.got()) == 2, 10)
    assert rx.got()[1]["headers"]["webhook-id"] == rx.got()[0]["headers"]["webhook-id"]
    shot(d, "deliveries", 1280)

    # Revoke the token: the next send is refused.
    click(d, ".tab[data-tab=tokens]")
    click(d, "#token-table button.danger")
    accept_confirm(d)
    wait(d, lambda _: "revoked" in d.find_element(By.ID, "status").text)
    assert wait_for(lambda: send(srv, token).status == 401, 5)
    r = send(srv, token)
    assert r.status == 401 and r.json()["error"]["code"] == "unauthorized"

    # Every control has a label (its own <label for>, or an aria-label) and every button a name.
    unlabeled = d.execute_script("""
        return Array.from(document.querySelectorAll('input, select, textarea, button')).filter(function (e) {
          if (e.tagName === 'BUTTON') return !(e.textContent.trim() || e.getAttribute('aria-label'));
          return !(e.id && document.querySelector('label[for="' + e.id + '"]')) && !e.getAttribute('aria-label');
        }).map(function (e) { return e.outerHTML; });""")
    assert unlabeled == []

    # Sign out forgets the token.
    click(d, "#signout")
    visible(d, "#signin")
    assert d.execute_script("return sessionStorage.getItem('omnigate.adminToken')") is None

    # ---- what the page did ----
    events = perf(d)
    # The requests of the console's document (chromium's own start-up pages are not the page's).
    urls = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
            and e["params"].get("documentURL", "").startswith(origin)]
    assert any(u.endswith("/console/app.js") for u in urls) and any("/admin/tenants" in u for u in urls)
    for u in urls:
        p = urllib.parse.urlsplit(u)
        assert p.scheme in ("http", "data", "about") and (p.scheme != "http" or "%s://%s" % (p.scheme, p.netloc) == origin), u
        assert ADMIN_TOKEN not in u and urllib.parse.quote(ADMIN_TOKEN) not in u, u
    for e in events:
        if e["method"] in ("Network.responseReceived", "Network.responseReceivedExtraInfo"):
            headers = (e["params"].get("response") or e["params"]).get("headers", {})
            assert not any(k.lower() == "set-cookie" for k in headers), headers
    assert d.get_cookies() == []
    assert d.execute_script("return document.cookie") == ""
    # The console's own files and API answers were all same-origin and kept the CSP (no violation
    # reported in the console log).
    problems = [m for m in d.get_log("browser") if "Content Security Policy" in m.get("message", "")]
    assert problems == [], problems

    # The access log has the console's requests, never the admin token.
    srv.stop()
    log = srv.stderr()
    assert "/console" in log and "/admin/tenants" in log
    assert ADMIN_TOKEN not in log


# ---- queued messages (API.md §19) ---------------------------------------------------------------------

Q_TO = {"sync": "+6281234500070", "scheduled": "+6281234500071", "canceled": "+6281234500072",
        "delivered": "+6281234500073", "expired": "+6281234500074", "first": "+6281234500075",
        "queued": "+6281234500076"}


def log_badges(d):
    """{reference: (status badge text, its colour class)} of the unified log rows, in one script."""
    return {r: tuple(b) for r, b in d.execute_script("""
        return Array.from(document.querySelectorAll('#log-table tbody tr')).map(function (r) {
          var b = r.querySelector('.badge');
          return [r.cells[0].textContent, b ? [b.textContent, b.className.replace('badge ', '')] : null];
        });""")}


def life(d):
    """The open timeline's queued life: [{step, tone, what, badge, at, note}], read in one script."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll('#timeline-body .life-step')).map(function (li) {
          var b = li.querySelector('.badge'), at = li.querySelector('.life-at'), n = li.querySelector('.life-note');
          return {step: li.getAttribute('data-step'), what: li.querySelector('.life-what').textContent,
                  tone: li.className.split(' ').filter(function (c) { return c !== 'life-step'; }).join(' '),
                  badge: b ? b.textContent : null, at: at ? at.textContent : null, note: n ? n.textContent : null};
        });""")


def open_message(d, reference):
    click(d, "#log-table button[aria-label='Timeline of %s']" % reference)
    dialog = visible(d, "#timeline")
    wait(d, lambda _: reference in d.find_element(By.ID, "timeline-h").text)
    return dialog


def close_message(d):
    click(d, "#timeline-close")
    wait(d, lambda _: not d.find_element(By.ID, "timeline").is_displayed())


def open_unified_log(d, srv):
    """Signs in, opens the tenant of `srv` and its Logs tab with the unified log chosen."""
    d.get("http://127.0.0.1:%d/console" % srv.port)
    fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
    fill(d, "#search-name", srv.tenant["name"]).send_keys(Keys.ENTER)
    wait(d, lambda _: texts(d, "#tenant-table tbody tr") == [srv.tenant["name"]])
    click(d, "#tenant-table tbody tr button")
    wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == srv.tenant["id"])
    click(d, ".tab[data-tab=logs]")
    Select(visible(d, "#log-kind")).select_by_value("omni")


def test_console_queued(make_server, fresh_db, tmp_path, browser):
    """A tenant's queued messages in the unified log (API.md §19): a scheduled one (sendAt an hour
    ahead), a canceled one, a queued one delivered after its Meta sender throttled it, one expired
    (its only channel throttled with a Retry-After past its validity) and one still queued behind
    its SMS sender's rate, next to sync sends. Each status as its badge; the status filter takes
    the four new statuses; each message's priority, due time and validity, and its queued life
    (accepted, due, each attempt with its throttles, how it ended or what it waits for); none of
    it for a sync send. Screenshots queued-logs and queued-timeline at 1280 and 375 px."""
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    d = browser
    try:
        def qsend(body, status=202):
            r = call(srv, "POST", "/api/omni/send", token=srv.token, body=body)
            assert r.status == status, r.body
            return r.json()["data"]["reference"]

        # The SMS sender ACME releases one message a 100 s (one token to start with); the simulator
        # lets Meta's sender through every 2 s and WAHA's every 100 s, and each sync send below takes
        # that token.
        tenant_with(srv, {"channels": {"sms": {"messagesPerSecond": {"ACME": 0.01}}}})
        srv.sim.limit("whatsapp_meta", 0.5, sender=META_ID, burst=1)
        srv.sim.limit("whatsapp_qr", 0.01, sender="default", burst=1)
        ref = {"sync": qsend({"to": Q_TO["sync"], "text": "now, on Meta", "channels": ["whatsapp_meta"]}, 200),
               "sync_qr": qsend({"to": Q_TO["sync"], "text": "now, on WAHA", "channels": ["whatsapp_qr"]}, 200)}
        ref["scheduled"] = qsend({"to": Q_TO["scheduled"], "text": "Your table is ready at 8", "channels": ["sms"],
                                  "sendAt": iso(time.time() + 3600), "priority": "low", "validitySeconds": 7200})
        ref["canceled"] = qsend({"to": Q_TO["canceled"], "text": "Reminder: your visit tomorrow",
                                 "channels": ["sms"], "sendAt": iso(time.time() + 3600)})
        r = call(srv, "POST", "/api/omni/messages/%s/cancel" % ref["canceled"], token=srv.token)
        assert r.status == 200 and r.json()["data"]["status"] == "canceled", r.body
        srv.sim.rule("whatsapp_meta", "ok", to=Q_TO["delivered"], callback="delivered_only")
        ref["delivered"] = qsend({"to": Q_TO["delivered"], "text": "Your order shipped", "queue": True,
                                  "channels": ["whatsapp_meta", "sms"], "priority": "high"})
        ref["expired"] = qsend({"to": Q_TO["expired"], "text": "Flash sale ends in 10 minutes", "queue": True,
                                "channels": ["whatsapp_qr"], "validitySeconds": 10})
        ref["first"] = qsend({"to": Q_TO["first"], "text": "Batch 1 of 2", "channels": ["sms"], "queue": True})
        ref["queued"] = qsend({"to": Q_TO["queued"], "text": "Batch 2 of 2", "channels": ["sms"], "queue": True})
        item = {"delivered": until_status(srv, ref["delivered"], ("delivered",), 20),
                "expired": until_status(srv, ref["expired"], ("expired",), 20),
                "first": until_status(srv, ref["first"], ("sent",), 10)}
        for k in ("sync", "scheduled", "canceled", "queued"):
            item[k] = message(srv, ref[k])
        assert item["queued"]["status"] == "queued" and item["scheduled"]["status"] == "scheduled"
        throttles = item["delivered"]["attempts"][0]["throttles"]
        assert throttles >= 1 and item["delivered"]["winningChannel"] == "whatsapp_meta"

        # The unified log: every message with its status as a badge.
        open_unified_log(d, srv)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(log_badges(d)) == len(ref))
        want = {"sync": ("sent", "good"), "sync_qr": ("sent", "good"), "scheduled": ("scheduled", "info"),
                "canceled": ("canceled", "neutral"), "delivered": ("delivered", "good"),
                "expired": ("expired", "bad"), "first": ("sent", "good"), "queued": ("queued", "info")}
        assert log_badges(d) == {ref[k]: v for k, v in want.items()}
        shot(d, "queued-logs", 1280)
        shot(d, "queued-logs", 375)

        # The status filter offers the new statuses, and each finds its message.
        options = [o.get_attribute("value") for o in Select(d.find_element(By.ID, "log-status")).options]
        assert {"queued", "scheduled", "canceled", "expired"} <= set(options)
        for st in ("scheduled", "canceled", "expired", "queued"):
            Select(d.find_element(By.ID, "log-status")).select_by_value(st)
            click(d, "#logs-form button[type=submit]")
            wait(d, lambda _: list(log_badges(d)) == [ref[st]])
        Select(d.find_element(By.ID, "log-status")).select_by_value("")
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(log_badges(d)) == len(ref))

        # The delivered one: its fields, then accepted, due at once, the attempt throttled before
        # Meta took it, completed.
        m = item["delivered"]
        a = m["attempts"][0]
        dialog = open_message(d, ref["delivered"])
        terms = dict(dialog_terms(d))
        assert terms["Status"] == "delivered" and terms["Priority"] == "high"
        assert terms["Due at"] == m["dueAt"] and terms["Valid until"] == m["validUntil"]
        assert life(d) == [
            {"step": "accepted", "tone": "done", "what": "Accepted", "badge": None, "at": m["createdAt"], "note": None},
            {"step": "due", "tone": "done", "what": "Due", "badge": None, "at": m["dueAt"], "note": "at once"},
            {"step": "attempt", "tone": "good throttled", "what": "Attempt 1 · whatsapp_meta", "badge": "sent",
             "at": a["attemptedAt"], "note": "throttled %d× (429) before this outcome" % throttles},
            {"step": "end", "tone": "good", "what": "Completed", "badge": "delivered", "at": m["completedAt"],
             "note": "on whatsapp_meta"}]
        assert "%d× (429) before this outcome" % throttles in dialog.text  # the attempt's own details too
        shot(d, "queued-timeline", 1280)
        shot(d, "queued-timeline", 375)
        close_message(d)

        # The scheduled one: due in an hour, waiting for it, valid two hours after.
        m = item["scheduled"]
        open_message(d, ref["scheduled"])
        terms = dict(dialog_terms(d))
        assert (terms["Status"], terms["Priority"], terms["Due at"], terms["Valid until"]) == \
            ("scheduled", "low", m["dueAt"], m["validUntil"])
        assert [(s["step"], s["tone"], s["what"], s["at"]) for s in life(d)] == [
            ("accepted", "done", "Accepted", m["createdAt"]), ("due", "ahead", "Due (not reached)", m["dueAt"]),
            ("waiting", "ahead", "Waiting until it is due", None), ("valid-until", "ahead", "Valid until", m["validUntil"])]
        assert "No attempt yet." in d.find_element(By.ID, "timeline").text
        close_message(d)

        # The canceled one: never due, no provider called.
        m = item["canceled"]
        open_message(d, ref["canceled"])
        assert dict(dialog_terms(d))["Status"] == "canceled"
        assert [(s["step"], s["what"], s["at"], s["note"]) for s in life(d)] == [
            ("accepted", "Accepted", m["createdAt"], None), ("due", "Due (not reached)", m["dueAt"], None),
            ("end", "Canceled", m["completedAt"], "no provider was called for it")]
        assert "No attempt: no provider was called." in d.find_element(By.ID, "timeline").text
        close_message(d)

        # The expired one: WAHA's 429 asked for a retry after its validity, so it ended there.
        m = item["expired"]
        open_message(d, ref["expired"])
        assert dict(dialog_terms(d))["Status"] == "expired"
        assert [(s["step"], s["tone"], s["what"], s["badge"], s["at"]) for s in life(d)] == [
            ("accepted", "done", "Accepted", None, m["createdAt"]), ("due", "done", "Due", None, m["dueAt"]),
            ("attempt", "bad", "Attempt 1 · whatsapp_qr", "failed", m["attempts"][0]["attemptedAt"]),
            ("end", "bad", "Expired", None, m["completedAt"])]
        assert life(d)[-1]["note"] == "no channel could take it while it was valid"
        assert "provider_rate_limited" in d.find_element(By.ID, "timeline").text
        close_message(d)

        # The one behind its sender's rate: due, waiting for its turn.
        m = item["queued"]
        open_message(d, ref["queued"])
        assert dict(dialog_terms(d))["Priority"] == "normal"
        assert [(s["step"], s["what"]) for s in life(d)] == [
            ("accepted", "Accepted"), ("due", "Due"), ("waiting", "Waiting for its turn at its sender's rate"),
            ("valid-until", "Valid until")]
        close_message(d)

        # A sync send: none of it.
        open_message(d, ref["sync"])
        assert [t for t, _ in dialog_terms(d)] == ["Status", "Mode", "Winning channel", "Created", "Completed", "Text"]
        assert d.find_elements(By.CSS_SELECTOR, "#timeline-body .life") == []
        close_message(d)

        problems = [x for x in d.get_log("browser") if "Content Security Policy" in x.get("message", "")]
        assert problems == [], problems
    finally:
        srv.sim.stop()


# ---- a batch (API.md §20) ------------------------------------------------------------------------------

def batch_counts(d):
    """The batch summary's counts as {status: (n, badge colour)}, read in one script."""
    return {k: tuple(v) for k, v in d.execute_script("""
        return Array.from(document.querySelectorAll('#batch-counts li')).map(function (li) {
          var b = li.querySelector('.badge');
          return [li.getAttribute('data-status'), [Number(li.querySelector('.n').textContent),
                                                   b.className.replace('badge ', '')]];
        });""")}


def test_console_batch(make_server, fresh_db, tmp_path, browser):
    """A tenant's batch in the console: the unified log filtered by its id lists its messages
    (one delivered, one scheduled an hour ahead, one canceled; a rejected one is not there), and
    the batch's summary above them shows its total, when it was made, that it is not complete
    (one waiting) and its counts by status as the log's badges; then its cancel completes it.
    A malformed id is the log's error under the field; an unknown one says so. Screenshots
    batch at 1280 and 375 px."""
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    d = browser
    try:
        tos = ["+6281234500081", "+6281234500082", "+6281234500083"]
        srv.sim.rule("sms", "ok", to=tos[0], callback="delivered_only")
        r = call(srv, "POST", "/api/omni/batches", token=srv.token, body={
            "defaults": {"channels": ["sms"], "text": "Hi {{name}}, your table is ready"},
            "messages": [{"to": tos[0], "variables": {"name": "Ana"}},
                         {"to": tos[1], "variables": {"name": "Budi"}, "sendAt": iso(time.time() + 3600)},
                         {"to": tos[2], "variables": {"name": "Citra"}, "sendAt": iso(time.time() + 3600)},
                         {"to": "not a number", "variables": {"name": "Dewi"}}]})
        data = assert_ok(r, 202)["data"]
        bid, refs = data["batchId"], data["references"]
        assert refs[3] is None and len(data["rejected"]) == 1
        until_status(srv, refs[0], ("delivered",), 20)
        r = call(srv, "POST", "/api/omni/messages/%s/cancel" % refs[2], token=srv.token)
        assert r.status == 200, r.body
        batch = assert_ok(call(srv, "GET", "/api/omni/batches/" + bid, token=srv.token))["data"]
        assert (batch["counts"]["delivered"], batch["counts"]["scheduled"], batch["counts"]["canceled"]) == (1, 1, 1)

        open_unified_log(d, srv)

        # A malformed id: the log's own error, under the field; no summary.
        fill(d, "#log-batch", "kb_nope")
        click(d, "#logs-form button[type=submit]")
        err = visible(d, "[data-field=batchId] .field-error")
        assert "kb_" in err.text
        assert not d.find_element(By.ID, "batch-summary").is_displayed()

        # The batch: its three messages (not the rejected one), and its summary.
        fill(d, "#log-batch", bid)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(log_badges(d)) == 3)
        assert log_badges(d) == {refs[0]: ("delivered", "good"), refs[1]: ("scheduled", "info"),
                                 refs[2]: ("canceled", "neutral")}
        box = visible(d, "#batch-summary")
        wait(d, lambda _: batch_counts(d) == {"scheduled": (1, "info"), "delivered": (1, "good"),
                                              "canceled": (1, "neutral")})
        assert bid in d.find_element(By.ID, "batch-h").text
        terms = dict(zip([e.text for e in box.find_elements(By.TAG_NAME, "dt")],
                         [e.text for e in box.find_elements(By.TAG_NAME, "dd")]))
        assert terms == {"Messages": "3", "Created": batch["createdAt"], "Completed": "not yet: 1 waiting"}, terms
        shot(d, "batch", 1280)
        shot(d, "batch", 375)

        # Canceled whole, it completes (within about a second): the summary says when.
        assert_ok(call(srv, "POST", "/api/omni/batches/%s/cancel" % bid, token=srv.token))
        done = wait_for(lambda: assert_ok(call(srv, "GET", "/api/omni/batches/" + bid,
                                               token=srv.token))["data"]["completedAt"], 10)
        assert done
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: batch_counts(d) == {"delivered": (1, "good"), "canceled": (2, "neutral")})
        wait(d, lambda _: "Completed" in d.find_element(By.ID, "batch-facts").text and
             "not yet" not in d.find_element(By.ID, "batch-facts").text)

        # An id no batch has: nothing listed, and the status line says so.
        fill(d, "#log-batch", "kb_" + "0" * 26)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: "No batch" in d.find_element(By.ID, "status").text)
        assert not d.find_element(By.ID, "batch-summary").is_displayed()

        problems = [x for x in d.get_log("browser") if "Content Security Policy" in x.get("message", "")]
        assert problems == [], problems
    finally:
        srv.sim.stop()


# ---- WhatsApp templates (API.md §18) -----------------------------------------------------------------

WABA = "102290129340398"
PNID = "109876543210"
# A catalogue in Meta's shape, as the simulator lists it (test/sim/README.md). old_promo's body
# holds markup that must show as text.
CATALOGUE = [
    {"name": "order_update", "language": "en_US", "status": "APPROVED", "category": "UTILITY",
     "components": [{"type": "BODY", "text": "Hi {{1}}, your order {{2}} ships today."},
                    {"type": "BUTTONS", "buttons": [{"type": "URL", "text": "Track", "url": "https://acme.example/t/{{1}}"},
                                                    {"type": "QUICK_REPLY", "text": "Stop updates"}]}]},
    {"name": "welcome", "language": "en", "status": "APPROVED", "category": "MARKETING", "parameter_format": "NAMED",
     "components": [{"type": "BODY", "text": "Welcome {{first_name}}! Your ACME account is ready."}]},
    {"name": "relay", "language": "en", "status": "APPROVED", "category": "UTILITY",
     "components": [{"type": "BODY", "text": "Message from ACME: {{1}}"}]},
    {"name": "login_code", "language": "en", "status": "APPROVED", "category": "AUTHENTICATION",
     "components": [{"type": "BODY", "text": "{{1}} is your verification code."},
                    {"type": "BUTTONS", "buttons": [{"type": "OTP", "otp_type": "COPY_CODE", "text": "Copy code"}]}]},
    {"name": "old_promo", "language": "en", "status": "PAUSED", "category": "MARKETING",
     "components": [{"type": "BODY", "text": "Sale: 20% off this week. Reply <b>STOP</b> to opt out."}]},
    {"name": "winter_sale", "language": "id", "status": "DISABLED", "category": "MARKETING",
     "components": [{"type": "BODY", "text": "Halo {{1}}, diskon musim dingin sudah dimulai!"}]},
    {"name": "refund_notice", "language": "en", "status": "REJECTED", "category": "UTILITY",
     "components": [{"type": "BODY", "text": "Hi {{1}}, your refund of {{2}} is on its way."}]},
]
NAMES = sorted(t["name"] for t in CATALOGUE)  # the list's order: name, language, WABA


def load_catalogue(sim, templates, behaviour="ok"):
    sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA,
              {"phoneNumberIds": [PNID], "templates": templates, "listBehaviour": behaviour})


def template_rows(d):
    """Each row of the templates table as {name, language, status, badge, category, marks, body,
    buttons}, read in one script."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll('#tpl-table tbody tr')).map(function (r) {
          var badge = r.cells[2].querySelector('.badge');
          return {name: r.cells[0].querySelector('code').textContent, language: r.cells[1].textContent,
                  status: badge.textContent, badge: badge.className, category: r.cells[3].textContent,
                  marks: Array.from(r.cells[4].querySelectorAll('mark.ph')).map(function (m) { return m.textContent; }),
                  body: r.cells[4].querySelector('.tpl-body').textContent,
                  buttons: Array.from(r.cells[5].querySelectorAll('li')).map(function (l) { return l.textContent; })};
        });""")


def tpl_names(d):
    return [r["name"] for r in template_rows(d)]


def test_console_templates(gateway, browser, sim):
    """A tenant's WhatsApp templates: Sync from Meta refused while no Meta number has a wabaId
    (422, shown under the filters); the settings editor sets the wabaId, outsideWindow with its
    window template (required: the error on the group's own line) and the OTP template; Sync
    while Meta fails (502 provider_error shown, nothing listed); Sync again: the simulator's
    catalogue listed with its statuses as badges, the placeholders marked, the buttons, markup
    shown as text; a status Meta changed comes in with the next Sync; filtered by status and by
    name (a bad name refused next to its field); paged; screenshots at 1280 and 375 px; no CSP
    violation."""
    srv, d = gateway, browser
    sim._call("DELETE", "/__sim/meta/wabas")
    load_catalogue(sim, CATALOGUE, behaviour="error")
    tenant = assert_ok(call(srv, "POST", "/admin/tenants", token=ADMIN_TOKEN, body={"name": "Template Shop"}), 201)["data"]
    origin = "http://127.0.0.1:%d" % srv.port
    d.get(origin + "/console")
    fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
    visible(d, "#tenants")
    fill(d, "#search-name", "template shop").send_keys(Keys.ENTER)
    wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["Template Shop"])
    click(d, "#tenant-table tbody tr button")
    wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == tenant["id"])

    # No Meta number with a wabaId yet: nothing listed, and Sync says why (422).
    click(d, ".tab[data-tab=templates]")
    visible(d, "#tpl-empty")
    click(d, "#tpl-sync")
    err = visible(d, "#tpl-form .error")
    wait(d, lambda _: "validation_failed" in err.text and "wabaId" in err.text)

    # The settings editor: the Meta number with its WABA, outsideWindow template (its window
    # template is required), the OTP template.
    click(d, ".tab[data-tab=settings]")
    d.find_element(By.ID, "set-meta-enabled").click()
    fill(d, "#set-meta-numbers", "%s %s %s %s" % (WA_FROM, PNID, META_TOKEN, WABA))
    Select(visible(d, "#set-meta-outside")).select_by_value("template")
    click(d, "#settings-form button[type=submit]")
    group_err = visible(d, "[data-field='settings.channels.whatsapp_meta.windowTemplate'] > .field-error")
    assert "required" in group_err.text and "validation_failed" in group_err.text
    assert not d.find_element(By.CSS_SELECTOR, "[data-field='settings.channels.whatsapp_meta.windowTemplate.name'] "
                                               ".field-error").is_displayed()
    fill(d, "#set-meta-wt-name", "relay")
    fill(d, "#set-meta-wt-lang", "en")
    fill(d, "#set-otp-wt-name", "login_code")
    fill(d, "#set-otp-wt-lang", "en")
    click(d, "#settings-form button[type=submit]")
    wait(d, lambda _: "Settings saved" in d.find_element(By.ID, "status").text)
    # Stored: the tenant opened again shows them (the token masked, the WABA on the number's line).
    click(d, "#tenant-back")
    wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["Template Shop"])
    click(d, "#tenant-table tbody tr button")
    visible(d, "#settings-form")
    value = lambda i: d.find_element(By.ID, i).get_attribute("value")  # noqa: E731
    wait(d, lambda _: value("set-meta-numbers") != "")
    line = value("set-meta-numbers")
    assert line.startswith("%s %s ****" % (WA_FROM, PNID)) and line.endswith(" " + WABA) and META_TOKEN not in line
    assert d.find_element(By.ID, "set-meta-enabled").is_selected()
    assert [value(i) for i in ("set-meta-outside", "set-meta-wt-name", "set-meta-wt-lang", "set-otp-wt-name",
                               "set-otp-wt-lang")] == ["template", "relay", "en", "login_code", "en"]

    # Meta fails: 502 provider_error under the filters, nothing listed.
    click(d, ".tab[data-tab=templates]")
    click(d, "#tpl-sync")
    err = visible(d, "#tpl-form .error")
    wait(d, lambda _: "provider_error" in err.text)
    assert d.find_element(By.ID, "tpl-sync").is_enabled()

    # Meta answers: the catalogue is listed.
    load_catalogue(sim, CATALOGUE)
    click(d, "#tpl-sync")
    wait(d, lambda _: "Synced from Meta: %d templates" % len(CATALOGUE) in d.find_element(By.ID, "status").text)
    wait(d, lambda _: tpl_names(d) == NAMES)
    assert not d.find_element(By.CSS_SELECTOR, "#tpl-form .error").is_displayed()
    rows = {r["name"]: r for r in template_rows(d)}
    want = {t["name"]: t["status"] for t in CATALOGUE}
    assert {n: r["status"] for n, r in rows.items()} == want
    badge = {"APPROVED": "good", "PAUSED": "warn", "DISABLED": "bad", "REJECTED": "bad"}
    for n, r in rows.items():
        assert r["badge"] == "badge " + badge[r["status"]], r
    order = rows["order_update"]
    assert order["language"] == "en_US" and order["category"] == "utility"
    assert order["marks"] == ["{{1}}", "{{2}}"] and order["body"] == "Hi {{1}}, your order {{2}} ships today."
    assert order["buttons"] == ["URL Track https://acme.example/t/{{1}} (takes a parameter)", "QUICK_REPLY Stop updates"]
    assert rows["welcome"]["marks"] == ["{{first_name}}"]
    assert rows["login_code"]["buttons"] == ["OTP Copy code (takes a parameter)"]
    # Markup in a body is text: shown as written, never an element.
    assert rows["old_promo"]["body"] == "Sale: 20% off this week. Reply <b>STOP</b> to opt out."
    assert d.find_elements(By.CSS_SELECTOR, "#tpl-table b") == []
    shot(d, "templates", 1280)
    shot(d, "templates", 375)

    # Meta pauses relay: the next Sync shows it.
    sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % WABA,
               {"name": "relay", "language": "en", "event": "PAUSED", "notify": False})
    click(d, "#tpl-sync")
    wait(d, lambda _: {r["name"]: r["status"] for r in template_rows(d)}.get("relay") == "PAUSED")
    assert [r["badge"] for r in template_rows(d) if r["name"] == "relay"] == ["badge warn"]

    # Filtered by status, then by name.
    Select(visible(d, "#tpl-status")).select_by_value("PAUSED")
    click(d, "#tpl-form button[type=submit]")
    wait(d, lambda _: tpl_names(d) == ["old_promo", "relay"])
    Select(visible(d, "#tpl-status")).select_by_value("DISABLED")
    click(d, "#tpl-form button[type=submit]")
    wait(d, lambda _: tpl_names(d) == ["winter_sale"])
    Select(visible(d, "#tpl-status")).select_by_value("REJECTED")
    fill(d, "#tpl-name", "order_update")
    click(d, "#tpl-form button[type=submit]")
    wait(d, lambda _: d.find_element(By.ID, "tpl-empty").is_displayed() and tpl_names(d) == [])
    Select(visible(d, "#tpl-status")).select_by_value("")
    click(d, "#tpl-form button[type=submit]")
    wait(d, lambda _: tpl_names(d) == ["order_update"])
    # A name the API refuses: its error next to the name field.
    fill(d, "#tpl-name", "Order Update")
    click(d, "#tpl-form button[type=submit]")
    name_err = visible(d, "#tpl-form [data-field=name] .field-error")
    assert "validation_failed" in name_err.text
    assert d.find_element(By.ID, "tpl-name").get_attribute("aria-invalid") == "true"

    # Paged like the logs: Next page until there is none.
    d.find_element(By.ID, "tpl-name").clear()
    fill(d, "#tpl-limit", "3")
    click(d, "#tpl-form button[type=submit]")
    wait(d, lambda _: tpl_names(d) == NAMES[:3] and d.find_element(By.ID, "tpl-more").is_displayed())
    click(d, "#tpl-more")
    wait(d, lambda _: tpl_names(d) == NAMES[:6])
    click(d, "#tpl-more")
    wait(d, lambda _: tpl_names(d) == NAMES and not d.find_element(By.ID, "tpl-more").is_displayed())

    # Every control labelled; no CSP violation; the token in no request URL.
    unlabeled = d.execute_script("""
        return Array.from(document.querySelectorAll('input, select, textarea, button')).filter(function (e) {
          if (e.tagName === 'BUTTON') return !(e.textContent.trim() || e.getAttribute('aria-label'));
          return !(e.id && document.querySelector('label[for="' + e.id + '"]')) && !e.getAttribute('aria-label');
        }).map(function (e) { return e.outerHTML; });""")
    assert unlabeled == []
    problems = [m for m in d.get_log("browser") if "Content Security Policy" in m.get("message", "")]
    assert problems == [], problems
    urls = [e["params"]["request"]["url"] for e in perf(d) if e["method"] == "Network.requestWillBeSent"
            and e["params"].get("documentURL", "").startswith(origin)]
    assert any("/templates/sync" in u for u in urls)
    for u in urls:
        assert u.startswith(origin) or u.startswith("data:") or u.startswith("about:"), u
        assert ADMIN_TOKEN not in u, u


# ---- inbound messages and consent (API.md §21) -----------------------------------------------------

IN_A = "+4915112345801"  # asked on Meta two hours ago (its window is open), then wrote STOP by SMS
IN_B = "+4915112345802"  # wrote on WAHA, with markup in the text
IN_C = "+4915112345803"  # opted out of both kinds through the API; known not to be on WhatsApp
# Markup a sender wrote: shown as written, never parsed (an element here would also change the title).
IN_HTML = '<img src=x onerror="document.title=\'owned\'"><b>Hi</b> & <script>document.title="owned"</script>'


def stamp_of(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def cells(d, table):
    """Each row of `table` as {data-label: the cell's text}, read in one script."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr')).map(function (r) {
          var o = {};
          Array.from(r.cells).forEach(function (c) { o[c.getAttribute('data-label')] = c.textContent; });
          return o; });""", table)


def inbound_rows(d, table="#in-table"):
    """The inbound table's rows as [(received, channel, channel badge class, from, to, type, text)]; from
    is None on a recipient's page (every row is theirs) and to without the phone number id or session
    under it."""
    return [tuple(r) for r in d.execute_script("""
        return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr')).map(function (r) {
          var c = function (l) { return r.querySelector('td[data-label="' + l + '"]'); };
          var b = c('Channel').querySelector('.badge');
          return [c('Received').textContent, b.textContent, b.className, c('From') ? c('From').textContent : null,
                  c('To').firstChild.firstChild.textContent, c('Type').textContent, c('Text').textContent]; });""",
        table)]


def want_rows(items, with_from=True):
    badge = {"sms": "badge ch-sms", "whatsapp_meta": "badge ch-whatsapp", "whatsapp_qr": "badge ch-whatsapp"}
    return [(i["receivedAt"], i["channel"], badge[i["channel"]], i["from"] if with_from else None, i["to"], i["type"],
             i["text"]) for i in items]


def recipient_facts(d):
    return dict(d.execute_script("""
        return Array.from(document.querySelectorAll('#rcp-facts dt')).map(function (t) {
          return [t.textContent, t.nextElementSibling.textContent]; });"""))


def open_tenant_tab(d, srv, tab):
    """Signs in, opens the tenant of `srv` and its tab `tab`."""
    d.get("http://127.0.0.1:%d/console" % srv.port)
    fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
    fill(d, "#search-name", srv.tenant["name"]).send_keys(Keys.ENTER)
    wait(d, lambda _: texts(d, "#tenant-table tbody tr") == [srv.tenant["name"]])
    click(d, "#tenant-table tbody tr button")
    wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == srv.tenant["id"])
    click(d, ".tab[data-tab=%s]" % tab)


def test_console_inbound(make_server, fresh_db, tmp_path, browser):
    """Inbound messages and consent in the console (API.md §21), seeded through the providers' signed
    webhooks (a Meta message that opens a window, a STOP by SMS that opts its sender out of SMS, a
    WAHA message whose text holds markup) and the API (an opt-out of both kinds). The Inbound view
    lists them newest first with their texts (the markup as text), filtered by sender, channel,
    since and until, paged; a sender opens its recipient page: the suppression (kind, source,
    reason, since), the open window, the last inbound time and its messages; a typed number
    shows the API's suppressions, a closed window and the not-on-WhatsApp mark; the Suppressions
    view lists every row, filtered by number and kind; the unified log's To opens the recipient
    too. Screenshots inbound, recipient and suppressions at 1280 and 375 px; no CSP violation."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV)
    d = browser
    try:
        srv.tenant = new_tenant(srv, settings=IN_SETTINGS, name="Inbound Shop")
        srv.token = new_token(srv, srv.tenant["id"])["token"]
        tid = srv.tenant["id"]
        old = int(time.time()) - 7200
        assert_ok(post_meta(srv, meta_message(IN_A, "Hi, is my order #1042 on its way?", ts=old)[0]))
        r, _ = post_twilio_in(srv, IN_A, "STOP")
        assert r.status == 200, r
        assert_ok(post_waha(srv, waha_message(IN_B, IN_HTML)[0]))
        assert_ok(call(srv, "PUT", "/api/suppressions/" + urllib.parse.quote(IN_C), token=srv.token,
                       body={"channels": ["whatsapp", "sms"], "reason": "asked by phone"}))
        query_url(srv.db_url, "INSERT INTO not_on_whatsapp (number, until) VALUES ('%s', '2099-01-01T00:00:00Z')" % IN_C)
        items = assert_ok(call(srv, "GET", "/admin/tenants/%s/inbound" % tid, token=ADMIN_TOKEN))["data"]["items"]
        assert [(i["from"], i["channel"]) for i in items] == [(IN_B, "whatsapp_qr"), (IN_A, "sms"),
                                                             (IN_A, "whatsapp_meta")], items
        sups = assert_ok(call(srv, "GET", "/admin/tenants/%s/suppressions" % tid, token=ADMIN_TOKEN))["data"]["items"]
        since = {(x["to"], x["channel"]): x["createdAt"] for x in sups}

        # The Inbound view: newest first, each with its channel badge, sender, number, type and text.
        open_tenant_tab(d, srv, "inbound")
        wait(d, lambda _: len(inbound_rows(d)) == 3)
        assert inbound_rows(d) == want_rows(items)
        assert items[2]["text"] == "Hi, is my order #1042 on its way?" and items[1]["text"] == "STOP"
        # The sender's markup is text: shown as written, no element made of it, nothing ran.
        assert inbound_rows(d)[0][6] == IN_HTML
        assert d.find_elements(By.CSS_SELECTOR, "#in-table img, #in-table b, #in-table script") == []
        assert d.title == "Omnigate console"
        # Where each came in: Meta's phone number id, WAHA's session.
        under = [c["To"] for c in cells(d, "#in-table")]
        assert under[0].endswith("session default") and under[2].endswith("phone number id " + META_PNID), under
        wait(d, lambda _: "3 inbound messages shown." in d.find_element(By.ID, "status").text)
        shot(d, "inbound", 1280)
        shot(d, "inbound", 375)

        # Filters: channel, sender, since, until; a malformed sender refused next to its field.
        Select(visible(d, "#in-channel")).select_by_value("sms")
        click(d, "#in-form button[type=submit]")
        wait(d, lambda _: inbound_rows(d) == want_rows(items[1:2]))
        Select(visible(d, "#in-channel")).select_by_value("")
        fill(d, "#in-from", IN_A)
        click(d, "#in-form button[type=submit]")
        wait(d, lambda _: inbound_rows(d) == want_rows(items[1:]))
        d.find_element(By.ID, "in-from").clear()
        fill(d, "#in-since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old + 60)))
        click(d, "#in-form button[type=submit]")
        wait(d, lambda _: inbound_rows(d) == want_rows(items[:2]))
        d.find_element(By.ID, "in-since").clear()
        fill(d, "#in-until", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old + 60)))
        click(d, "#in-form button[type=submit]")
        wait(d, lambda _: inbound_rows(d) == want_rows(items[2:]))
        d.find_element(By.ID, "in-until").clear()
        fill(d, "#in-from", "12345")
        click(d, "#in-form button[type=submit]")
        err = visible(d, "#in-form [data-field=from] .field-error")
        assert "validation_failed" in err.text
        assert d.find_element(By.ID, "in-from").get_attribute("aria-invalid") == "true"
        # Paged: two, then the third with Next page.
        d.find_element(By.ID, "in-from").clear()
        fill(d, "#in-limit", "2")
        click(d, "#in-form button[type=submit]")
        wait(d, lambda _: inbound_rows(d) == want_rows(items[:2]) and d.find_element(By.ID, "in-more").is_displayed())
        assert not err.is_displayed()
        click(d, "#in-more")
        wait(d, lambda _: inbound_rows(d) == want_rows(items) and not d.find_element(By.ID, "in-more").is_displayed())

        # A sender opens its recipient page: the STOP's suppression, Meta's window, its messages.
        click(d, "#in-table button[aria-label='Open recipient %s']" % IN_A)
        visible(d, "#rcp")
        wait(d, lambda _: d.find_element(By.ID, "rcp-h").text == "Recipient " + IN_A)
        assert d.find_element(By.CSS_SELECTOR, ".tab[data-tab=recipient]").get_attribute("aria-pressed") == "true"
        assert d.switch_to.active_element == d.find_element(By.ID, "rcp-h")
        assert d.find_element(By.ID, "rcp-to").get_attribute("value") == IN_A
        assert recipient_facts(d) == {"Suppressed": "sms", "WhatsApp window": "open until " + stamp_of(old + 86400),
                                      "Not on WhatsApp until": "not marked", "Last inbound at": items[1]["receivedAt"]}
        assert cells(d, "#rcp-sup-table") == [{"Kind": "sms", "Source": "keyword", "Reason": "STOP",
                                               "Since": since[(IN_A, "sms")]}]
        assert cells(d, "#rcp-win-table") == [{"Phone number id": META_PNID + "+" + WA_FROM,
                                               "Open until": stamp_of(old + 86400)}]
        assert not d.find_element(By.ID, "rcp-sup-none").is_displayed()
        assert not d.find_element(By.ID, "rcp-win-none").is_displayed()
        wait(d, lambda _: inbound_rows(d, "#rcp-in-table") == want_rows(items[1:], with_from=False))
        shot(d, "recipient", 1280)
        shot(d, "recipient", 375)

        # A number typed as people write it: the API's suppressions, no window, marked off WhatsApp,
        # never wrote.
        fill(d, "#rcp-to", "+49 151 1234-5803").send_keys(Keys.ENTER)
        wait(d, lambda _: d.find_element(By.ID, "rcp-h").text == "Recipient " + IN_C)
        assert cells(d, "#rcp-sup-table") == [
            {"Kind": "sms", "Source": "api", "Reason": "asked by phone", "Since": since[(IN_C, "sms")]},
            {"Kind": "whatsapp", "Source": "api", "Reason": "asked by phone", "Since": since[(IN_C, "whatsapp")]}]
        assert recipient_facts(d) == {"Suppressed": "smswhatsapp", "WhatsApp window": "closed",
                                      "Not on WhatsApp until": "2099-01-01T00:00:00.000Z", "Last inbound at": "never"}
        assert d.find_element(By.ID, "rcp-win-none").is_displayed()
        assert not d.find_element(By.ID, "rcp-win-table").is_displayed()
        wait(d, lambda _: d.find_element(By.ID, "rcp-in-none").is_displayed())
        assert inbound_rows(d, "#rcp-in-table") == []
        # One who never wrote and never opted out: none, closed.
        fill(d, "#rcp-to", "+4915112345809").send_keys(Keys.ENTER)
        wait(d, lambda _: d.find_element(By.ID, "rcp-h").text == "Recipient +4915112345809")
        assert d.find_element(By.ID, "rcp-sup-none").is_displayed()
        assert recipient_facts(d)["Suppressed"] == "none" and recipient_facts(d)["WhatsApp window"] == "closed"
        # Not a number: the API's error next to the field, and no stale page under it.
        fill(d, "#rcp-to", "12345").send_keys(Keys.ENTER)
        err = visible(d, "#rcp-form [data-field=to] .field-error")
        assert "validation_failed" in err.text
        assert not d.find_element(By.ID, "rcp").is_displayed()

        # The Suppressions view: every one in force, by number and kind; filtered; a number opens it.
        click(d, ".tab[data-tab=suppressions]")
        want = [{"Number": IN_A, "Kind": "sms", "Source": "keyword", "Reason": "STOP", "Since": since[(IN_A, "sms")]},
                {"Number": IN_C, "Kind": "sms", "Source": "api", "Reason": "asked by phone",
                 "Since": since[(IN_C, "sms")]},
                {"Number": IN_C, "Kind": "whatsapp", "Source": "api", "Reason": "asked by phone",
                 "Since": since[(IN_C, "whatsapp")]}]
        wait(d, lambda _: cells(d, "#sup-table") == want)
        shot(d, "suppressions", 1280)
        shot(d, "suppressions", 375)
        Select(visible(d, "#sup-kind")).select_by_value("whatsapp")
        click(d, "#sup-form button[type=submit]")
        wait(d, lambda _: cells(d, "#sup-table") == want[2:])
        Select(visible(d, "#sup-kind")).select_by_value("")
        fill(d, "#sup-to", IN_A)
        click(d, "#sup-form button[type=submit]")
        wait(d, lambda _: cells(d, "#sup-table") == want[:1])
        fill(d, "#sup-to", IN_B)
        click(d, "#sup-form button[type=submit]")
        wait(d, lambda _: d.find_element(By.ID, "sup-empty").is_displayed() and cells(d, "#sup-table") == [])
        d.find_element(By.ID, "sup-to").clear()
        fill(d, "#sup-limit", "2")
        click(d, "#sup-form button[type=submit]")
        wait(d, lambda _: cells(d, "#sup-table") == want[:2] and d.find_element(By.ID, "sup-more").is_displayed())
        click(d, "#sup-more")
        wait(d, lambda _: cells(d, "#sup-table") == want and not d.find_element(By.ID, "sup-more").is_displayed())
        click(d, "#sup-table button[aria-label='Open recipient %s']" % IN_C)
        wait(d, lambda _: d.find_element(By.ID, "rcp-h").text == "Recipient " + IN_C)

        # The unified log's To opens the recipient too.
        sent = assert_ok(call(srv, "POST", "/api/omni/send", token=srv.token,
                              body={"to": IN_A, "text": "On its way!", "channels": ["whatsapp_meta"]}))["data"]
        click(d, ".tab[data-tab=logs]")
        Select(visible(d, "#log-kind")).select_by_value("omni")
        fill(d, "#log-to", IN_A)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: texts(d, "#log-table tbody tr") == [sent["reference"]])
        click(d, "#log-table button[aria-label='Open recipient %s']" % IN_A)
        wait(d, lambda _: d.find_element(By.ID, "rcp-h").text == "Recipient " + IN_A)
        wait(d, lambda _: len(inbound_rows(d, "#rcp-in-table")) == 2)

        # Every control labelled; no CSP violation; the token in no request URL.
        unlabeled = d.execute_script("""
            return Array.from(document.querySelectorAll('input, select, textarea, button')).filter(function (e) {
              if (e.tagName === 'BUTTON') return !(e.textContent.trim() || e.getAttribute('aria-label'));
              return !(e.id && document.querySelector('label[for="' + e.id + '"]')) && !e.getAttribute('aria-label');
            }).map(function (e) { return e.outerHTML; });""")
        assert unlabeled == []
        problems = [m for m in d.get_log("browser") if "Content Security Policy" in m.get("message", "")]
        assert problems == [], problems
        origin = "http://127.0.0.1:%d" % srv.port
        urls = [e["params"]["request"]["url"] for e in perf(d) if e["method"] == "Network.requestWillBeSent"
                and e["params"].get("documentURL", "").startswith(origin)]
        assert any("/recipients/%2B" in u for u in urls)
        for u in urls:
            assert u.startswith(origin) or u.startswith("data:") or u.startswith("about:"), u
            assert ADMIN_TOKEN not in u, u
    finally:
        srv.sim.stop()


def test_console_assets(gateway):
    """GET /console and its two files: the content types, ETag with If-None-Match -> 304 (no
    body), the strict CSP (nothing from elsewhere, nothing inline), nosniff, no cookie; no
    credentials needed to load the page; the three together under 200 KiB."""
    srv = gateway
    total = 0
    for path, ctype in (("/console", "text/html; charset=utf-8"), ("/console/app.js", "text/javascript; charset=utf-8"),
                        ("/console/app.css", "text/css; charset=utf-8")):
        r = srv.request("GET", path)
        assert r.status == 200, r
        assert r.header("Content-Type") == ctype
        csp = r.header("Content-Security-Policy")
        directives = dict((x.strip().split(" ", 1) + [""])[:2] for x in csp.split(";") if x.strip())
        assert directives["default-src"] == "'none'"
        for k in ("script-src", "style-src", "connect-src", "img-src"):
            assert directives[k] == "'self'", (k, csp)
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert directives["frame-ancestors"] == "'none'"
        assert r.header("X-Content-Type-Options") == "nosniff"
        assert r.header("Set-Cookie") is None
        etag = r.header("ETag")
        assert etag and etag.startswith('"') and etag.endswith('"')
        total += len(r.body)
        again = srv.request("GET", path, headers=[("If-None-Match", etag)])
        assert again.status == 304 and again.body == b"" and again.header("ETag") == etag
        weak = srv.request("GET", path, headers=[("If-None-Match", '"other", W/' + etag)])
        assert weak.status == 304
        other = srv.request("GET", path, headers=[("If-None-Match", '"something-else"')])
        assert other.status == 200 and other.body == r.body
        assert srv.request("POST", path).status == 405
    assert total < 200 * 1024, total
    html = srv.request("GET", "/console").body.decode()
    # Nothing inline: no script body, no style element or attribute, no event handler attribute.
    assert "<style" not in html and " style=" not in html and not re.search(r"<[^>]*\son[a-z]+\s*=", html)
    assert html.count("<script") == 1 and '<script src="/console/app.js" defer></script>' in html
    js = srv.request("GET", "/console/app.js").body.decode()
    for bad in ("eval(", "new Function", "innerHTML", "document.write", "localStorage.setItem", "document.cookie ="):
        assert bad not in js, bad


# ---- usage (API.md §22) ---------------------------------------------------------------------------------

U_CARD = {"currency": "USD", "rates": [{"channel": "sms", "prefix": "", "price": "0.0500"},
                                       {"channel": "whatsapp_meta", "prefix": "", "price": "0.0140"},
                                       {"channel": "whatsapp_qr", "prefix": "", "price": "0"}]}
# The simulator's magic numbers (test/sim/README.md): +1999, what whatsapp_qr, whatsapp_meta and sms
# answer (0 ok, 1 refused, 2 fails with a 500), then the status callbacks of the accepted send
# (1 delivered and read, 4 undelivered, 8 sent only, 9 delivered only). Sent with the tenant's
# default channels (whatsapp_qr, whatsapp_meta, sms, in fallback) unless channels are given.
U_SENDS = [
    ("+19990001000", None),     # WAHA takes it, delivered and read: won by whatsapp_qr
    ("+19990008000", None),     # WAHA takes it, never delivered: won by whatsapp_qr
    ("+19992001000", None),     # WAHA fails, Meta takes it, delivered and read: won by whatsapp_meta
    ("+19992201000", None),     # both WhatsApp fail, SMS takes it, delivered and read: won by sms
    ("+19991204000", None),     # WAHA refuses, Meta fails, SMS takes it, then undelivered: won by sms
    ("+19992220000", None),     # every channel fails: no winner
    ("+19990009000", ["sms"]),  # SMS only (no fallback), delivered
]
# What the tenant's sends add up to, by channel: (messages, accepted, delivered, read, failed).
U_BY_CHANNEL = {"whatsapp_qr": (6, 2, 1, 1, 4), "whatsapp_meta": (4, 1, 1, 1, 3), "sms": (4, 3, 2, 1, 1)}
U_FIELDS = ("messages", "attempts", "accepted", "delivered", "read", "failed", "segments")
CHANNELS = ["whatsapp_qr", "whatsapp_meta", "sms"]


def utc_days(n=30):
    """The `n` UTC days ending today, oldest first (the console's range)."""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    return [(today - datetime.timedelta(days=i)).isoformat() for i in range(n - 1, -1, -1)]


def usage_api(srv, path, by):
    days = utc_days()
    return assert_ok(call(srv, "GET", "%s?since=%sT00:00:00Z&until=%sT00:00:00Z&groupBy=%s" % (path, days[0], days[-1], by),
                          token=ADMIN_TOKEN))["data"]


def js_percent(part, whole):
    """What the console writes for part of whole: one decimal, rounded half up, none when whole."""
    v = math.floor(part * 1000 / whole + 0.5) / 10
    return ("%d" % v if v == int(v) else "%.1f" % v) + "%"


def seed_history(srv, tenant_id):
    """Usage on 19 of the 29 days before today, as merged rows of usage_totals (shard 0, what the
    sweep leaves of a past day, sql/024): sends can only be made today, and a month of bars is
    what the charts are for. No fallback wins (the fallback share is today's sends alone)."""
    rows = []

    def add(day, ch, messages, accepted=0, delivered=0, read=0, segments=0, cost=0):
        attempts, failed = (messages, messages - accepted) if ch else (0, 0)
        rows.append("('%s', '%s', '%s', 0, %d, %d, %d, %d, %d, %d, %d, %d)" % (
            tenant_id, day, ch, messages, attempts, accepted, delivered, read, failed, segments, cost))
    today = datetime.datetime.now(datetime.timezone.utc).date()
    for i in range(1, 30):
        if i % 3 == 2:
            continue  # a quiet day: no row, drawn as nothing
        day = (today - datetime.timedelta(days=i)).isoformat()
        n = 4 + (i * 7) % 11
        qr_ok = max(0, n - 3 - i % 3)
        meta_try = n - 1 - qr_ok
        meta_ok = max(0, meta_try - 1 - i % 2)
        sms_try = meta_try - meta_ok + 1
        sms_ok = sms_try - (i % 4 == 0)
        add(day, "", n)
        add(day, "whatsapp_qr", n - 1, qr_ok, qr_ok - i % 2, (qr_ok - i % 2) // 2)
        if meta_try:
            add(day, "whatsapp_meta", meta_try, meta_ok, meta_ok, meta_ok // 2, cost=14000 * meta_ok)
        add(day, "sms", sms_try, sms_ok, max(0, sms_ok - (i % 3 == 0)), 0, sms_ok, 50000 * sms_ok)
    query_url(srv.db_url, "INSERT INTO usage_totals (tenant_id, day, channel, shard, messages, attempts, accepted, "
              "delivered, read, failed, segments, cost_micros) VALUES " + ", ".join(rows))


def usage_dom(d, box):
    """What usage view `box` shows, read in one script."""
    return d.execute_script("""
        var box = document.getElementById(arguments[0]);
        var q = function (s) { return box.querySelector(s); }, all = function (s) { return Array.from(box.querySelectorAll(s)); };
        var txt = function (s) { var e = q(s); return e ? e.textContent : null; };
        var svg = function (s) {
          var e = q(s);
          return e ? {viewBox: e.getAttribute('viewBox'), width: e.getAttribute('width'), role: e.getAttribute('role'),
                      labelledby: (e.getAttribute('aria-labelledby') || '').split(' ').map(function (i) {
                        var n = document.getElementById(i); return n ? n.tagName + ':' + n.textContent : null; })} : null;
        };
        return {
          state: box.getAttribute('data-state'), summary: txt('.usage-summary'), empty: txt('.usage-empty'),
          daily: svg('[data-chart=daily] svg'), delivery: svg('[data-chart=delivery] svg'),
          fallback: svg('[data-chart=fallback] svg'), cost: svg('[data-chart=cost] svg'),
          days: all('[data-chart=daily] g.day').map(function (g) { return g.getAttribute('data-day'); }),
          segs: all('[data-chart=daily] rect.seg').map(function (r) {
            return [r.parentNode.getAttribute('data-day'), r.getAttribute('data-series'), r.getAttribute('data-value')]; }),
          legend: all('[data-chart=daily] .legend li').map(function (l) { return l.textContent; }),
          rates: all('[data-chart=delivery] g.rate').map(function (g) {
            return [g.getAttribute('data-channel'), g.querySelector('.value').textContent,
                    g.querySelectorAll('rect.seg').length]; }),
          sectors: all('[data-chart=fallback] path.seg').map(function (p) { return p.getAttribute('data-channel'); }),
          ringText: all('[data-chart=fallback] svg text').map(function (t) { return t.textContent; }),
          fbCount: txt('.fb-count'), fbSavings: txt('.fb-savings'),
          fbLegend: all('.fb-facts .legend li').map(function (l) { return l.textContent; }),
          fbEmpty: txt('[data-chart=fallback] .empty'),
          costBars: all('[data-chart=cost] rect.seg').map(function (r) {
            return [r.parentNode.getAttribute('data-day'), r.getAttribute('data-value')]; }),
          costTotal: txt('.cost-total'), costTitle: txt('[data-chart=cost] h3'),
          totals: all('.usage-totals tbody tr').map(function (r) {
            var o = {}; Array.from(r.cells).forEach(function (c) { o[c.getAttribute('data-label')] = c.textContent; });
            return o; })
        };""", box)


def want_usage(srv, path):
    """What a usage view of `path` must show, from the API's three answers."""
    by_day, by_ch, by_dc = (usage_api(srv, path, by) for by in ("day", "channel", "day,channel"))
    fb, cur = by_ch["fallback"], by_day["currency"]
    priced = [r for r in by_day["rows"] if r["cost"] and decimal.Decimal(r["cost"]["amount"]) > 0]
    return {
        "summary_messages": sum(r["messages"] for r in by_day["rows"]),
        "days": sorted({r["day"] for r in by_dc["rows"] if r["messages"]}),
        "segs": sorted([r["day"], r["channel"], str(r["messages"])] for r in by_dc["rows"] if r["messages"]),
        "rates": [[r["channel"], js_percent(r["delivered"], r["accepted"]) + " · %d of %d delivered" % (
            r["delivered"], r["accepted"]) if r["accepted"] else "nothing accepted", 1 if r["delivered"] else 0]
            for r in by_ch["rows"]],
        "sectors": [ch for ch in CHANNELS if fb["wonBy"][ch]],
        "fbLegend": ["%s: %d (%s)" % (ch, fb["wonBy"][ch], js_percent(fb["wonBy"][ch], fb["messages"]))
                     for ch in CHANNELS if fb["messages"]],
        "fallback": fb,
        "costBars": sorted([r["day"], r["cost"]["amount"]] for r in priced),
        "costTotal": "Total %s %s" % (sum(decimal.Decimal(r["cost"]["amount"]) for r in by_day["rows"] if r["cost"]), cur),
        "totals": [dict({"Channel": r["channel"], "Cost": "%s %s" % (r["cost"]["amount"], r["cost"]["currency"])},
                        **{f.capitalize(): str(r[f]) for f in U_FIELDS if f != "attempts"}) for r in by_ch["rows"]],
        "by_ch": by_ch,
    }


def check_usage(d, box, want):
    """The usage view `box` shows exactly what the API says (`want`, from want_usage)."""
    wait(d, lambda _: usage_dom(d, box)["state"] == "ready")
    got = usage_dom(d, box)
    assert ("%d messages from " % want["summary_messages"]) in got["summary"] and "USD" in got["summary"], got["summary"]
    # Every picture is an SVG that scales (viewBox, width 100%) with a name and a description.
    for k, title in (("daily", "Messages per day by channel"), ("delivery", "Delivery rate by channel"),
                     ("fallback", "Fallback share by winning channel"), ("cost", "Cost per day in USD")):
        s = got[k]
        assert s["role"] == "img" and s["width"] == "100%" and re.match(r"^0 0 \d+ \d+$", s["viewBox"]), (k, s)
        assert s["labelledby"][0].startswith("title:" + title) and s["labelledby"][1].startswith("desc:"), (k, s)
    # 1. A bar for each day with messages, a segment for each channel of it, of the API's numbers.
    assert got["days"] == want["days"]
    assert sorted(got["segs"]) == want["segs"]
    assert got["legend"] == [r["channel"] for r in want["by_ch"]["rows"]]
    # 2. Delivered of accepted per channel, the percentage written.
    assert got["rates"] == want["rates"]
    # 3. The fallback share: a sector per winning channel, the number and the savings as text.
    fb = want["fallback"]
    assert got["sectors"] == want["sectors"] and got["fbLegend"] == want["fbLegend"]
    assert got["ringText"] == [str(fb["messages"]), "fallback"]
    assert got["fbCount"] == "%d fallback messages: sent with more than one channel and accepted on one." % fb["messages"]
    assert got["fbSavings"] == "Saved %s %s against sending them by SMS." % (fb["savings"]["amount"],
                                                                            fb["savings"]["currency"])
    # 4. A cost bar for each day that cost something, the API's amount; the total summed exactly.
    assert sorted(got["costBars"]) == want["costBars"]
    assert got["costTotal"] == want["costTotal"] and got["costTitle"] == "Cost per day (USD)"
    # The totals per channel are the API's.
    assert got["totals"] == want["totals"]
    return got


def test_console_usage(make_server, fresh_db, tmp_path, browser):
    """The Usage view (API.md §22): empty first ("No messages in the last 30 days"); then, with a
    global rate card, a tenant's fallback sends won on each channel (the simulator's magic numbers),
    one failing everywhere, an SMS-only one, delivery statuses from the simulator, a month of
    earlier days, and another tenant's SMS: every tenant's usage drawn as four SVG charts (messages
    per day by channel, delivery rate by channel, fallback share, cost per day) and a totals
    table, each equal to GET /admin/usage; the tenant's Usage tab equal to its admin mirror.
    Screenshots usage at 1280 and 375 px (drawn again for the narrow width, nothing wider than
    the page); no CSP violation."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    try:
        shop = new_tenant(srv, settings=SETTINGS_ALL, name="Usage Shop")
        other = new_tenant(srv, settings=SETTINGS_ALL, name="Other Shop")
        shop_token = new_token(srv, shop["id"])["token"]
        srv.token = new_token(srv, other["id"])["token"]

        # Nothing sent yet: the empty state, no chart.
        d.get("http://127.0.0.1:%d/console" % srv.port)
        fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
        visible(d, "#tenants")
        click(d, ".view[data-view=usage]")
        visible(d, "#usage")
        wait(d, lambda _: usage_dom(d, "usage-all")["state"] == "ready")
        got = usage_dom(d, "usage-all")
        assert got["empty"] == "No messages in the last 30 days." and got["daily"] is None and got["totals"] == []
        assert got["summary"].startswith("0 messages from ")
        assert d.find_element(By.CSS_SELECTOR, ".view[data-view=usage]").get_attribute("aria-pressed") == "true"

        # The global card, priced by every worker, then the sends; the other tenant sends one SMS
        # (its usage is the tenant view's second case below).
        put_card(srv, U_CARD)
        assert_ok(call(srv, "POST", "/api/sms/send", token=srv.token, body={"to": "+4915112345000", "text": "probe"}))
        for to, channels in U_SENDS:
            body = {"to": to, "text": "Your order has shipped"}
            if channels:
                body["channels"] = channels
            r = call(srv, "POST", "/api/omni/send", token=shop_token, body=body)
            assert r.status in (200, 502), r.body

        def settled():
            rows = {r["channel"]: r for r in usage_api(srv, "/admin/tenants/%s/usage" % shop["id"], "channel")["rows"]}
            return all(ch in rows and tuple(rows[ch][f] for f in ("messages", "accepted", "delivered", "read", "failed"))
                       == want for ch, want in U_BY_CHANNEL.items())
        assert wait_for(settled, 20), usage_api(srv, "/admin/tenants/%s/usage" % shop["id"], "channel")
        mine = usage_api(srv, "/admin/tenants/%s/usage" % shop["id"], "channel")
        assert mine["fallback"] == {"messages": 5, "wonBy": {"whatsapp_qr": 2, "whatsapp_meta": 1, "sms": 2},
                                    "savings": {"amount": "0.1360", "currency": "USD"}}, mine["fallback"]
        seed_history(srv, shop["id"])

        # Every tenant's usage: the four charts and the table are the API's.
        click(d, ".view[data-view=tenants]")
        visible(d, "#tenants")
        click(d, ".view[data-view=usage]")
        want_all = want_usage(srv, "/admin/usage")
        assert len(want_all["days"]) == 20 and len(want_all["sectors"]) == 3
        got = check_usage(d, "usage-all", want_all)
        assert got["empty"] is None
        shot(d, "usage", 1280)

        # At 375 px the charts are drawn again at that width (their text keeps its size) and
        # nothing is wider than the page.
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 375, "height": 900, "deviceScaleFactor": 1,
                                                                 "mobile": True})
        wait(d, lambda _: int(usage_dom(d, "usage-all")["daily"]["viewBox"].split()[2]) < 375)
        assert d.execute_script("return document.documentElement.scrollWidth") <= 375
        check_usage(d, "usage-all", want_all)
        shot(d, "usage", 375)
        wait(d, lambda _: int(usage_dom(d, "usage-all")["daily"]["viewBox"].split()[2]) > 500)

        # One tenant's: its Usage tab, equal to its admin mirror.
        click(d, ".view[data-view=tenants]")
        fill(d, "#search-name", "Usage Shop").send_keys(Keys.ENTER)
        wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["Usage Shop"])
        click(d, "#tenant-table tbody tr button")
        wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == shop["id"])
        assert d.find_element(By.CSS_SELECTOR, ".view[data-view=tenants]").get_attribute("aria-pressed") == "true"
        click(d, ".tab[data-tab=usage]")
        want_one = want_usage(srv, "/admin/tenants/%s/usage" % shop["id"])
        check_usage(d, "usage-tenant", want_one)
        assert want_one["totals"] != want_all["totals"]
        shot(d, "usage-tenant", 1280)

        # The other tenant sent only its SMS: no fallback message.
        click(d, "#tenant-back")
        fill(d, "#search-name", "Other Shop").send_keys(Keys.ENTER)
        wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["Other Shop"])
        click(d, "#tenant-table tbody tr button")
        wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == other["id"])
        want_other = want_usage(srv, "/admin/tenants/%s/usage" % other["id"])
        assert [r["Channel"] for r in want_other["totals"]] == ["sms"] and want_other["fallback"]["messages"] == 0
        click(d, ".tab[data-tab=usage]")
        wait(d, lambda _: usage_dom(d, "usage-tenant")["state"] == "ready" and
             usage_dom(d, "usage-tenant")["totals"] == want_other["totals"])
        got = usage_dom(d, "usage-tenant")
        assert got["fbEmpty"] == "No fallback message in the last 30 days." and got["fallback"] is None
        assert sorted(got["segs"]) == want_other["segs"] and sorted(got["costBars"]) == want_other["costBars"]

        problems = [x for x in d.get_log("browser") if "Content Security Policy" in x.get("message", "")]
        assert problems == [], problems
    finally:
        srv.sim.stop()

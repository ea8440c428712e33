"""Issue 21: the admin console (GET /console) in a real browser. Debian's headless chromium,
driven by chromedriver through python3-selenium, against the real gateway on a real PostgreSQL
with the provider simulator (the e2e harness). Not skipped when the browser is missing: it is a
test dependency (deploy/install-deps.sh), so a machine without it fails here.

The walk: a wrong admin token is refused on screen; sign in; create a tenant, unlock the unified
API and enable SMS; set its webhook (secret shown once); create a token and read it once; send a
message with it through the API; find it in the unified log by number and open its timeline;
retry its webhook delivery; revoke the token and see the next send refused (401). Screenshots at 375 and 1280 px wide go to test/e2e/screenshots/. Throughout, the
page must make no request to another origin (chromium's performance log), set no cookie, and the
admin token must never appear in a URL or in the gateway's access log."""

import json
import os
import re
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
from gwlib import ADMIN_TOKEN, call, make_gateway, provider_env, sim  # noqa: F401
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

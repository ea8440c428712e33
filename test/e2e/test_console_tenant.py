"""API.md §23 "Tenant console": GET /console signed in with a tenant token that has scope keys
shows that tenant only, through the tenant API (never a request to /admin): its Unified API
tokens (created and shown once with a copy button, revoked; while the plan locks the unified API,
the notice that an administrator must enable it), its logs with the timeline, its usage charts,
its webhook, suppressions and templates, and its WhatsApp QR session (started, its QR code drawn
until the phone links it, stopped, logged out). A valid token without keys is told what it needs;
the admin token still signs in as before (test_console.py holds the admin console).

Debian's headless chromium driven by python3-selenium against the real gateway on a real
PostgreSQL, the providers being the simulator (test/sim), as in test_console.py, whose browser
fixture and helpers this file shares. Screenshots go to test/e2e/screenshots/ (tenant-*.png)."""

import json
import struct
import urllib.parse

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from conftest import assert_ok, wait_for
from gwlib import (ADMIN_TOKEN, SETTINGS_ALL, admin, call, linked_gateway, new_tenant, new_token,  # noqa: F401
                   set_unified)
from test_console import (U_BY_CHANNEL, U_CARD, U_SENDS, accept_confirm, browser, check_usage, click,  # noqa: F401
                          dialog_terms, fill, perf, shot, texts, usage_api, visible, wait, want_usage)
from test_costs import put_card
from test_qr_sessions import steady

KEYS = ["send", "otp", "logs", "keys"]
HOOK_A = "https://hooks.kopi.example/omnigate"
HOOK_B = "https://rival.example/secret-hook"
TO_A = "+6281234500201"   # tenant A's customer
TO_B = "+6281299990999"   # tenant B's customer: must never show in A's console
SUP_A = "+6281234500202"
SUP_B = "+6281299990998"
PNID_A, PNID_B = "109876543210", "109876543299"
WABA_A, WABA_B = "102290129340311", "102290129340399"


# ---- helpers --------------------------------------------------------------------------------------------

def meta_settings(pnid, waba):
    """Every channel (SETTINGS_ALL) with the Meta number on phone number id `pnid` of WABA `waba`."""
    s = json.loads(json.dumps(SETTINGS_ALL))
    number = s["defaultWhatsappFrom"]
    s["channels"]["whatsapp_meta"]["numbers"][number].update({"phoneNumberId": pnid, "wabaId": waba})
    return s


def template(name, body):
    return {"name": name, "language": "en", "status": "APPROVED", "category": "UTILITY",
            "components": [{"type": "BODY", "text": body}]}


def sign_in(d, srv, tok):
    d.get("http://127.0.0.1:%d/console" % srv.port)
    fill(d, "#signin-token", tok).send_keys(Keys.ENTER)


def sign_in_tenant(d, srv, tok, name):
    sign_in(d, srv, tok)
    visible(d, "#tenant")
    wait(d, lambda _: d.find_element(By.ID, "tenant-h").text == name)


def tab(d, name):
    click(d, ".tab[data-tab=%s]" % name)
    visible(d, "#panel-" + name)


def page_text(d):
    """Everything the page holds as text: every node's text (hidden panels included), every
    input's value and every attribute value, read in one script."""
    return d.execute_script("""
        var out = [document.body.textContent];
        document.querySelectorAll('input, textarea, select').forEach(function (e) { out.push(e.value); });
        document.querySelectorAll('*').forEach(function (e) {
          Array.from(e.attributes).forEach(function (a) { out.push(a.value); }); });
        return out.join('\\n');""")


def page_requests(d, origin):
    """The URLs of the requests the console's document made (chromium's performance log)."""
    return [e["params"]["request"]["url"] for e in perf(d) if e["method"] == "Network.requestWillBeSent"
            and e["params"].get("documentURL", "").startswith(origin)]


def assert_tenant_only_requests(d, origin, tok):
    """Every request of the page: to the gateway, none to /admin, the token in no URL; no CSP
    violation."""
    urls = page_requests(d, origin)
    assert any(urllib.parse.urlsplit(u).path == "/api/tenant" for u in urls), urls
    for u in urls:
        p = urllib.parse.urlsplit(u)
        assert p.scheme in ("data", "about") or "%s://%s" % (p.scheme, p.netloc) == origin, u
        assert not p.path.startswith("/admin"), u
        assert tok not in u and urllib.parse.quote(tok) not in u, u
    problems = [m for m in d.get_log("browser") if "Content Security Policy" in m.get("message", "")]
    assert problems == [], problems
    return urls


def token_rows(d):
    """The token table as [(name cell, prefix, scopes, revoked)], read in one script."""
    return [tuple(r) for r in d.execute_script("""
        return Array.from(document.querySelectorAll('#token-table tbody tr')).map(function (r) {
          var c = r.cells;
          return [c[0].textContent, c[1].textContent, c[2].textContent, c[5].textContent]; });""")]


def refused(srv, tok):
    r = call(srv, "GET", "/api/tenant", token=tok)
    return r.status == 401


def unified(srv, tok):
    """What GET /api/tenant says of the plan lock, for `tok`'s tenant."""
    return assert_ok(call(srv, "GET", "/api/tenant", token=tok))["data"]["unifiedApiEnabled"]


# ---- a tenant sees its own tenant only -------------------------------------------------------------------

def test_tenant_console_shows_its_own_tenant_only(make_server, fresh_db, tmp_path, browser):
    """Signed in with tenant A's keys token, the console shows A alone: no tenant list, no
    settings; A's tokens, webhook, templates, unified log with a message's timeline, webhook
    deliveries, suppressions and usage charts (equal to A's usage), read through the tenant API;
    and nothing of tenant B (its name, id, tokens, webhook, templates, messages, numbers), though
    B has all of them. The page made no request to /admin, none with the token in its URL, and
    the gateway's access log never has the token."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    origin = "http://127.0.0.1:%d" % srv.port
    try:
        a = new_tenant(srv, settings=meta_settings(PNID_A, WABA_A), name="Kopi Nusantara")
        b = new_tenant(srv, settings=meta_settings(PNID_B, WABA_B), name="Rival Retail")
        a_keys = new_token(srv, a["id"], scopes=KEYS, name="console")
        a_send = new_token(srv, a["id"], name="backend")
        b_tokens = [new_token(srv, b["id"], scopes=KEYS, name="rival-console"),
                    new_token(srv, b["id"], name="rival-backend")]
        srv.token = b_tokens[1]["token"]
        put_card(srv, U_CARD)  # the global rate card, probed with an SMS of B's (test_costs.py)

        # Each tenant's webhook, templates (its own WABA at the simulated Meta), suppression, sends.
        for t, hook in ((a, HOOK_A), (b, HOOK_B)):
            assert_ok(admin(srv, "PUT", "/admin/tenants/%s/webhook" % t["id"], {"url": hook}))
        srv.sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA_A, {"phoneNumberIds": [PNID_A], "templates": [
            template("kopi_order_ready", "Your {{1}} is ready at the counter.")]})
        srv.sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA_B, {"phoneNumberIds": [PNID_B], "templates": [
            template("rival_flash_sale", "Rival sale: {{1}} off today.")]})
        for t in (a, b):
            assert_ok(admin(srv, "POST", "/admin/tenants/%s/templates/sync" % t["id"]))
        assert_ok(call(srv, "PUT", "/api/suppressions/%s" % urllib.parse.quote(SUP_A), token=a_send["token"],
                       body={"channels": ["sms"], "reason": "asked by phone"}))
        assert_ok(call(srv, "PUT", "/api/suppressions/%s" % urllib.parse.quote(SUP_B), token=b_tokens[1]["token"],
                       body={"channels": ["sms"], "reason": "rival customer"}))
        b_sent = [assert_ok(call(srv, "POST", "/api/omni/send", token=b_tokens[1]["token"],
                                 body={"to": TO_B, "text": "Rival order confirmed", "channels": ["sms"]}))["data"]
                  for _ in range(2)]
        a_sent = assert_ok(call(srv, "POST", "/api/omni/send", token=a_send["token"],
                                body={"to": TO_A, "text": "Your kopi is ready", "channels": ["sms"]}))["data"]
        for to, channels in U_SENDS:  # a month's worth of charts needs fallback sends and prices
            body = {"to": to, "text": "Your order has shipped"}
            if channels:
                body["channels"] = channels
            assert call(srv, "POST", "/api/omni/send", token=a_send["token"], body=body).status in (200, 502)

        def settled():
            rows = {r["channel"]: r for r in usage_api(srv, "/admin/tenants/%s/usage" % a["id"], "channel")["rows"]}
            sms = U_BY_CHANNEL["sms"]
            want = dict(U_BY_CHANNEL, sms=(sms[0] + 1, sms[1] + 1) + sms[2:])  # and A's own SMS above
            return all(ch in rows and rows[ch]["messages"] == w[0] and rows[ch]["accepted"] == w[1]
                       for ch, w in want.items())
        assert wait_for(settled, 20), usage_api(srv, "/admin/tenants/%s/usage" % a["id"], "channel")
        assert wait_for(lambda: assert_ok(admin(srv, "GET", "/admin/tenants/%s/webhook/deliveries" % b["id"]))
                        ["data"]["items"], 10)

        # Signed in: A's name and id, no tenant list, no settings, no admin sections.
        sign_in_tenant(d, srv, a_keys["token"], "Kopi Nusantara")
        assert d.execute_script("return sessionStorage.getItem('omnigate.tenantToken')") == a_keys["token"]
        assert d.execute_script("return sessionStorage.getItem('omnigate.adminToken')") is None
        assert d.execute_script("return localStorage.length") == 0
        assert d.find_element(By.ID, "tenant-id").text == a["id"]
        for css in ("#tenants", ".views", "#tenant-back", ".tab[data-tab=settings]"):
            assert not d.find_element(By.CSS_SELECTOR, css).is_displayed(), css
        shown_tabs = [b.text for b in d.find_elements(By.CSS_SELECTOR, ".tab") if b.is_displayed()]
        assert shown_tabs == ["Unified API", "Webhook", "Templates", "Logs", "Inbound", "Suppressions",
                              "Recipient", "Usage", "WhatsApp QR"]
        assert "scopes send, otp, logs, keys" in d.find_element(By.ID, "tenant-who").text
        seen = []

        # Unified API: A's two tokens, this console's marked; the form (the plan is unlocked).
        wait(d, lambda _: len(token_rows(d)) == 2)
        rows = {r[1]: r for r in token_rows(d)}
        assert rows[a_keys["prefix"]][0] == "consolethis console" and rows[a_send["prefix"]][0] == "backend"
        assert d.find_element(By.ID, "token-form").is_displayed()
        assert not d.find_element(By.ID, "token-locked").is_displayed()
        seen.append(page_text(d))
        shot(d, "tenant", 1280)
        shot(d, "tenant", 375)

        # Webhook: A's.
        tab(d, "webhook")
        wait(d, lambda _: d.find_element(By.ID, "webhook-url").get_attribute("value") == HOOK_A)
        assert "Enabled" in d.find_element(By.ID, "webhook-state").text
        seen.append(page_text(d))

        # Templates: A's catalogue only, and no Sync button (an admin's action).
        tab(d, "templates")
        wait(d, lambda _: texts(d, "#tpl-table tbody tr") == ["kopi_order_readyWABA " + WABA_A])
        assert not d.find_element(By.ID, "tpl-sync").is_displayed()
        seen.append(page_text(d))

        # The unified log: A's messages; one's timeline.
        tab(d, "logs")
        Select(visible(d, "#log-kind")).select_by_value("omni")
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(texts(d, "#log-table tbody tr")) == 1 + len(U_SENDS))
        assert a_sent["reference"] in texts(d, "#log-table tbody tr")
        seen.append(page_text(d))
        fill(d, "#log-to", TO_A)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: texts(d, "#log-table tbody tr") == [a_sent["reference"]])
        click(d, "#log-table button[aria-label='Timeline of %s']" % a_sent["reference"])
        dialog = visible(d, "#timeline")
        wait(d, lambda _: "sms: sent" in dialog.text)
        assert a_sent["reference"] in d.find_element(By.ID, "timeline-h").text
        terms = dict(dialog_terms(d))
        assert terms["Status"] == "sent" and terms["Winning channel"] == "sms" and terms["Text"] == "Your kopi is ready"
        assert "Latency" in dialog.text
        shot(d, "tenant-timeline", 1280)
        click(d, "#timeline-close")
        wait(d, lambda _: not d.find_element(By.ID, "timeline").is_displayed())
        # Another tenant's number finds nothing here.
        fill(d, "#log-to", TO_B)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: d.find_element(By.ID, "log-empty").is_displayed())
        # The SMS log and A's webhook deliveries.
        Select(visible(d, "#log-kind")).select_by_value("sms")
        fill(d, "#log-to", TO_A)
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(texts(d, "#log-table tbody tr")) == 1)
        assert TO_A in d.find_element(By.ID, "log-table").text and "omni" in d.find_element(By.ID, "log-table").text
        seen.append(page_text(d))
        Select(visible(d, "#log-kind")).select_by_value("deliveries")
        click(d, "#logs-form button[type=submit]")
        wait(d, lambda _: len(texts(d, "#log-table tbody tr")) > 0)
        shown = texts(d, "#log-table tbody tr")  # their ids: A's, as the admin lists them (more may come)
        a_deliveries = assert_ok(admin(srv, "GET", "/admin/tenants/%s/webhook/deliveries?limit=500" % a["id"]))
        assert set(shown) <= {x["id"] for x in a_deliveries["data"]["items"]}, shown
        seen.append(page_text(d))

        # Suppressions: A's.
        tab(d, "suppressions")
        wait(d, lambda _: texts(d, "#sup-table tbody tr") == [SUP_A])
        seen.append(page_text(d))

        # Usage: A's charts, equal to A's admin mirror (B's SMS would change the sms row).
        tab(d, "usage")
        want = want_usage(srv, "/admin/tenants/%s/usage" % a["id"])
        check_usage(d, "usage-tenant", want)
        assert "GET /api/usage" in d.find_element(By.ID, "panel-usage").text
        seen.append(page_text(d))
        shot(d, "tenant-usage", 1280)

        # Nothing of B anywhere the page went; A's own markers were there (the check can fail).
        text = "\n".join(seen)
        for mine in (a["id"], a_keys["prefix"], a_send["prefix"], HOOK_A, "kopi_order_ready", a_sent["reference"],
                     TO_A, SUP_A):
            assert mine in text, mine
        theirs = [b["id"], "Rival Retail", HOOK_B, "rival_flash_sale", TO_B, SUP_B, "rival customer",
                  "rival-console", "rival-backend", "+4915112345000"]
        theirs += [t["prefix"] for t in b_tokens] + [m["reference"] for m in b_sent]
        assert [x for x in theirs if x in text] == []

        assert_tenant_only_requests(d, origin, a_keys["token"])
        assert d.get_cookies() == []
        srv.stop()
        log = srv.stderr()
        assert "/api/tenant" in log and a_keys["token"] not in log
    finally:
        srv.sim.stop()


# ---- the Unified API: a token created, shown once, copied, revoked -------------------------------------

def test_tenant_console_creates_copies_and_revokes_a_token(make_server, fresh_db, tmp_path, browser):
    """A keys token without otp creates a token: only its own scopes are offered (send, logs,
    keys; keys unchecked), the new token is shown once in its box, the Copy button puts it on the
    clipboard (navigator.clipboard) or, where the page has none, selects it; the box closed, it
    is gone from the page and the list shows its prefix. Revoked from the list, it is refused
    over HTTP (401) within the 2 s of API.md §1."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    origin = "http://127.0.0.1:%d" % srv.port
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="Token Shop")
        keys = new_token(srv, t["id"], scopes=["send", "logs", "keys"], name="console")
        d.execute_cdp_cmd("Browser.grantPermissions",
                          {"origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        sign_in_tenant(d, srv, keys["token"], "Token Shop")
        wait(d, lambda _: len(token_rows(d)) == 1)
        offered = {c.get_attribute("value"): c.is_selected() for c in
                   d.find_elements(By.CSS_SELECTOR, "#token-form input[type=checkbox]") if c.is_displayed()}
        assert offered == {"send": True, "logs": True, "keys": False}

        fill(d, "#token-name", "checkout service")
        click(d, "#token-form button[type=submit]")
        value = visible(d, "#token-value")
        wait(d, lambda _: value.get_attribute("value").startswith("kft_"))
        made = value.get_attribute("value")
        wait(d, lambda _: len(token_rows(d)) == 2)
        listed = [r for r in token_rows(d) if r[0] == "checkout service"]
        assert len(listed) == 1 and made.startswith(listed[0][1]) and listed[0][2] == "send, logs"
        assert listed[0][3] == "no"
        assert_ok(call(srv, "GET", "/api/sms/logs", token=made))  # it works, with the scopes asked for
        shot(d, "tenant-token", 1280)

        # Copy: on the clipboard.
        click(d, "#token-once .copy")
        wait(d, lambda _: d.find_element(By.CSS_SELECTOR, "#token-once .copy").text == "Copied")
        clip = d.execute_async_script("var done = arguments[0]; navigator.clipboard.readText().then(done, "
                                      "function (e) { done('error: ' + e); });")
        assert clip == made

        # Where the page has no Clipboard API: the token is selected, ready for Ctrl+C.
        d.execute_script("Object.defineProperty(navigator, 'clipboard', {value: undefined, configurable: true});"
                         "document.getElementById('signin-token').focus();")
        click(d, "#token-once .copy")
        sel = d.execute_script("var e = document.activeElement; return [e.id, e.selectionStart, e.selectionEnd];")
        assert sel == ["token-value", 0, len(made)]

        # Closed: gone from the page for good.
        click(d, "#token-done")
        assert not d.find_element(By.ID, "token-once").is_displayed()
        assert made not in d.execute_script("return document.documentElement.outerHTML") and \
            d.find_element(By.ID, "token-value").get_attribute("value") == ""

        # Revoked from the list: refused over HTTP.
        click(d, "#token-table button[aria-label='Revoke token checkout service']")
        accept_confirm(d)
        wait(d, lambda _: "revoked" in d.find_element(By.ID, "status").text)
        wait(d, lambda _: [r[3] for r in token_rows(d) if r[0] == "checkout service"][0] != "no")
        assert wait_for(lambda: refused(srv, made), 5)
        assert not refused(srv, keys["token"])
        assert_tenant_only_requests(d, origin, keys["token"])
    finally:
        srv.sim.stop()


def test_tenant_console_locked_plan_shows_the_notice(make_server, fresh_db, tmp_path, browser):
    """While the plan locks the unified API, the Unified API section says an administrator must
    enable it and has no way to create a token (the list stays); a lock that happened after the
    page was read shows the same notice when creating a token meets 403 unified_api_locked; the
    lock lifted, the form is back."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="Locked Shop")
        keys = new_token(srv, t["id"], scopes=KEYS, name="console")  # made while unlocked
        set_unified(srv, t["id"], False)
        assert steady(lambda: unified(srv, keys["token"]) is False)
        sign_in_tenant(d, srv, keys["token"], "Locked Shop")
        notice = visible(d, "#token-locked")
        assert "An administrator must enable it" in notice.text
        assert not d.find_element(By.ID, "token-form").is_displayed()
        submits = d.find_elements(By.CSS_SELECTOR, "#panel-tokens button[type=submit]")
        assert [b for b in submits if b.is_displayed()] == []
        wait(d, lambda _: len(token_rows(d)) == 1)
        assert "not enabled (locked by the plan)" in d.find_element(By.ID, "tenant-who").text
        shot(d, "tenant-locked", 1280)
        shot(d, "tenant-locked", 375)

        # Unlocked by the administrator: the form is back when the section is opened again.
        set_unified(srv, t["id"], True)
        # Every worker has read the change (each caches a token's tenant for up to a second).
        assert steady(lambda: unified(srv, keys["token"]) is True)
        tab(d, "webhook")
        tab(d, "tokens")
        visible(d, "#token-form")
        assert not d.find_element(By.ID, "token-locked").is_displayed()

        # Locked again behind the page's back: creating a token meets the lock, and says so.
        set_unified(srv, t["id"], False)
        assert steady(lambda: unified(srv, keys["token"]) is False)
        fill(d, "#token-name", "too late")
        click(d, "#token-form button[type=submit]")
        visible(d, "#token-locked")
        assert not d.find_element(By.ID, "token-form").is_displayed()
        assert not d.find_element(By.ID, "token-once").is_displayed()
        assert len(assert_ok(admin(srv, "GET", "/admin/tenants/%s/tokens" % t["id"]))["data"]["items"]) == 1
        assert_tenant_only_requests(d, "http://127.0.0.1:%d" % srv.port, keys["token"])
    finally:
        srv.sim.stop()


def test_tenant_console_edits_its_webhook(make_server, fresh_db, tmp_path, browser):
    """The tenant's webhook through PUT/GET/DELETE /api/webhook and its rotate-secret: a bad URL
    refused next to its field, a good one saved with its events and its secret shown once (masked
    in the status line), the secret rotated (a new one, shown once), the webhook deleted; each
    as the admin API then reads it."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="Hook Shop")
        keys = new_token(srv, t["id"], scopes=KEYS)
        sign_in_tenant(d, srv, keys["token"], "Hook Shop")
        tab(d, "webhook")
        wait(d, lambda _: "No webhook yet" in d.find_element(By.ID, "webhook-state").text)
        assert not d.find_element(By.ID, "webhook-rotate").is_displayed()

        fill(d, "#webhook-url", "ftp://example.com/hook")
        click(d, "#webhook-form button[type=submit]")
        assert visible(d, "[data-field=url] .field-error").text

        fill(d, "#webhook-url", HOOK_A)
        for ev in ("message-delivered", "message-received"):
            d.find_element(By.ID, "event-" + ev).click()
        click(d, "#webhook-form button[type=submit]")
        secret = visible(d, "#secret-value")
        wait(d, lambda _: secret.get_attribute("value").startswith("whsec_"))
        first = secret.get_attribute("value")
        assert "****" in d.find_element(By.ID, "webhook-state").text and first not in \
            d.find_element(By.ID, "webhook-state").text
        wh = assert_ok(admin(srv, "GET", "/admin/tenants/%s/webhook" % t["id"]))["data"]
        assert wh["url"] == HOOK_A and sorted(wh["events"]) == ["message.delivered", "message.received"]
        assert wh["secret"].endswith(first[-4:])
        shot(d, "tenant-webhook", 1280)
        click(d, "#secret-done")
        assert d.find_element(By.ID, "secret-value").get_attribute("value") == ""

        click(d, "#webhook-rotate")
        accept_confirm(d)
        wait(d, lambda _: "rotated" in d.find_element(By.ID, "status").text)
        second = d.find_element(By.ID, "secret-value").get_attribute("value")
        assert second.startswith("whsec_") and second != first
        wh = assert_ok(admin(srv, "GET", "/admin/tenants/%s/webhook" % t["id"]))["data"]
        assert wh["secret"].endswith(second[-4:])
        click(d, "#secret-done")

        click(d, "#webhook-delete")
        accept_confirm(d)
        wait(d, lambda _: "No webhook yet" in d.find_element(By.ID, "webhook-state").text)
        assert admin(srv, "GET", "/admin/tenants/%s/webhook" % t["id"]).status == 404
        assert_tenant_only_requests(d, "http://127.0.0.1:%d" % srv.port, keys["token"])
    finally:
        srv.sim.stop()


# ---- who may sign in --------------------------------------------------------------------------------------

def test_tenant_token_without_keys_is_told_what_it_needs(make_server, fresh_db, tmp_path, browser):
    """A valid tenant token without scope keys is refused on the sign-in form with what it
    needs, and nothing is kept; a revoked one and a made-up one are wrong tokens; the admin token
    still signs in to the admin console, which lists the tenants."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    origin = "http://127.0.0.1:%d" % srv.port
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="Plain Shop")
        plain = new_token(srv, t["id"])  # send, otp, logs
        sign_in(d, srv, plain["token"])
        err = visible(d, "#signin-error")
        wait(d, lambda _: "needs a token with the keys scope" in err.text)
        assert "send, otp, logs" in err.text
        assert d.execute_script("return sessionStorage.length") == 0
        assert not d.find_element(By.ID, "app").is_displayed()
        shot(d, "tenant-nokeys", 1280)
        urls = page_requests(d, origin)
        assert not [u for u in urls if urllib.parse.urlsplit(u).path.startswith("/admin")], urls

        revoked = new_token(srv, t["id"], scopes=KEYS)
        assert_ok(admin(srv, "DELETE", "/admin/tenants/%s/tokens/%s" % (t["id"], revoked["id"])))
        assert steady(lambda: refused(srv, revoked["token"]))  # on every worker
        for wrong in (revoked["token"], "kft_" + "x" * 40):
            fill(d, "#signin-token", wrong).send_keys(Keys.ENTER)
            wait(d, lambda _: "Wrong admin token or tenant token" in d.find_element(By.ID, "signin-error").text)
            assert d.execute_script("return sessionStorage.length") == 0

        fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
        visible(d, "#tenants")
        wait(d, lambda _: "Plain Shop" in texts(d, "#tenant-table tbody tr"))
        assert d.execute_script("return sessionStorage.getItem('omnigate.adminToken')") == ADMIN_TOKEN
        assert d.execute_script("return sessionStorage.getItem('omnigate.tenantToken')") is None
        assert d.find_element(By.CSS_SELECTOR, ".views").is_displayed()
        click(d, "#tenant-table tbody tr button")
        visible(d, "#settings-form")
        assert d.find_element(By.CSS_SELECTOR, ".tab[data-tab=tokens]").text == "Tokens"
        assert not d.find_element(By.ID, "tenant-who").is_displayed()
        click(d, "#signout")
        visible(d, "#signin")
        assert d.execute_script("return sessionStorage.length") == 0
    finally:
        srv.sim.stop()


def test_tenant_console_survives_a_reload_and_signs_out(make_server, fresh_db, tmp_path, browser):
    """The tenant token kept in sessionStorage brings the same tenant back after a reload (read
    again from GET /api/tenant); revoking the token the console is signed in with (marked "this
    console", the confirmation says so) ends the session with a message; sign-out forgets it."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="Reload Shop")
        keys = new_token(srv, t["id"], scopes=KEYS, name="console")
        sign_in_tenant(d, srv, keys["token"], "Reload Shop")
        d.refresh()
        visible(d, "#tenant")
        wait(d, lambda _: d.find_element(By.ID, "tenant-h").text == "Reload Shop")
        wait(d, lambda _: len(token_rows(d)) == 1)
        click(d, "#signout")
        visible(d, "#signin")
        assert d.execute_script("return sessionStorage.length") == 0

        sign_in_tenant(d, srv, keys["token"], "Reload Shop")
        wait(d, lambda _: token_rows(d) and token_rows(d)[0][0] == "consolethis console")
        click(d, "#token-table button[aria-label='Revoke token console']")
        alert = wait(d, lambda drv: _alert(drv))
        assert "you will be signed out" in alert.text
        alert.accept()
        wait(d, lambda _: "You revoked the tenant token this console was signed in with" in
             d.find_element(By.ID, "signin-error").text)
        visible(d, "#signin")
        assert d.execute_script("return sessionStorage.length") == 0
    finally:
        srv.sim.stop()


def _alert(drv):
    try:
        return drv.switch_to.alert
    except NoAlertPresentException:
        return False


# ---- a WhatsApp QR session (API.md §23) -----------------------------------------------------------------

def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def canvas(d):
    """The QR canvas: [shown, width, height, its pixels as a data: URL, dark pixels]."""
    return d.execute_script("""
        var c = document.getElementById('qr-canvas'), fig = document.getElementById('qr-code');
        if (fig.hidden || !c.width) return [false, c.width, c.height, null, 0];
        var px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, dark = 0;
        for (var i = 0; i < px.length; i += 4) if (px[i] < 128) dark++;
        return [true, c.width, c.height, c.toDataURL(), dark];""")


def qr_status(d):
    """The session's status badge (read in one script: the page redraws it on each read)."""
    return d.execute_script("var b = document.querySelector('#qr-facts .badge[data-status]');"
                            "return b ? b.textContent : null;")


def test_tenant_console_links_a_whatsapp_qr_session(make_server, fresh_db, tmp_path, browser):
    """The WhatsApp QR section (session "default", the one SETTINGS_ALL's number uses): unknown
    at first, with a Start button; started, it waits for a scan and its QR code (the PNG fetched
    with the token in its header, drawn on a canvas: no image URL, the CSP untouched) is drawn and
    drawn again as the simulated WAHA renews it; the phone scans: WORKING with its number, the
    code gone; stopped; started again (still linked); logged out: a new code to scan. A session
    none of the tenant's numbers uses is refused (404) on screen. The admin console shows the
    same session through its admin mirrors."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    d = browser
    origin = "http://127.0.0.1:%d" % srv.port
    try:
        t = new_tenant(srv, settings=SETTINGS_ALL, name="QR Shop")
        keys = new_token(srv, t["id"], scopes=KEYS)
        # The routes land with the QR sessions work: a known path answers 405 to another method.
        if call(srv, "DELETE", "/api/whatsapp/sessions/x", token=keys["token"]).status == 404:
            pytest.skip("GET /api/whatsapp/sessions/{name} is not routed in this build yet (404 route not found)")
        srv.sim._call("PUT", "/__sim/waha/settings", {"qrRefreshMs": 1500})
        sign_in_tenant(d, srv, keys["token"], "QR Shop")
        tab(d, "qr")
        assert d.find_element(By.ID, "qr-name").get_attribute("value") == "default"
        wait(d, lambda _: "knows nothing of this session" in d.find_element(By.ID, "qr-facts").text)
        assert d.find_element(By.ID, "qr-h").text == "Session default"
        assert d.find_element(By.ID, "qr-start").is_displayed()
        assert not d.find_element(By.ID, "qr-stop").is_displayed()

        # A session none of the tenant's numbers uses: refused on screen.
        fill(d, "#qr-name", "someone-else")
        click(d, "#qr-form button[type=submit]")
        wait(d, lambda _: d.find_element(By.ID, "qr-h").text == "Session someone-else")
        click(d, "#qr-start")
        wait(d, lambda _: "not_found" in d.find_element(By.CSS_SELECTOR, "#qr-form .error").text)

        # Started: waiting for a scan, its QR code drawn, as the API serves it.
        fill(d, "#qr-name", "default")
        click(d, "#qr-form button[type=submit]")
        wait(d, lambda _: d.find_element(By.ID, "qr-h").text == "Session default")
        click(d, "#qr-start")
        wait(d, lambda _: qr_status(d) == "SCAN_QR_CODE")
        wait(d, lambda _: canvas(d)[0])
        png = call(srv, "GET", "/api/whatsapp/sessions/default/qr", token=keys["token"])
        assert png.status == 200 and png.header("Content-Type") == "image/png"
        first = canvas(d)
        assert (first[1], first[2]) == png_size(png.body) and first[4] > 0
        assert "Scan it with WhatsApp" in d.find_element(By.ID, "qr-code").text
        shot(d, "tenant-qr", 1280)
        shot(d, "tenant-qr", 375)
        # Read again every few seconds: WAHA's next code is drawn.
        wait(d, lambda _: canvas(d)[0] and canvas(d)[3] != first[3], 12)
        assert qr_status(d) == "SCAN_QR_CODE"

        # The phone scans: WORKING, its number, no code.
        srv.sim._call("POST", "/__sim/waha/sessions/default/scan", {"number": "+6281234567890"})
        wait(d, lambda _: qr_status(d) == "WORKING", 12)
        wait(d, lambda _: "+6281234567890 is linked" in d.find_element(By.ID, "qr-linked").text)
        assert "+6281234567890" in d.find_element(By.ID, "qr-facts").text
        assert not canvas(d)[0]
        assert d.find_element(By.ID, "qr-stop").is_displayed() and not d.find_element(By.ID, "qr-start").is_displayed()
        shot(d, "tenant-qr-linked", 1280)

        # Stopped (still linked), started again: WORKING without a scan.
        click(d, "#qr-stop")
        wait(d, lambda _: qr_status(d) == "STOPPED")
        assert d.find_element(By.ID, "qr-start").is_displayed()
        click(d, "#qr-start")
        wait(d, lambda _: qr_status(d) == "WORKING", 12)

        # Logged out: the phone unlinked, a new code to scan.
        click(d, "#qr-logout")
        accept_confirm(d)
        wait(d, lambda _: qr_status(d) == "SCAN_QR_CODE", 12)
        wait(d, lambda _: canvas(d)[0])
        assert "none linked" in d.find_element(By.ID, "qr-facts").text

        # A read right after an action says what WAHA's events said since the call was sent, which
        # may come before the state its answer gives: after a logout, STOPPED (its first move, or as
        # here the phone's stop while the answer was on its way, 1 s late) before STARTING. The
        # console reads on (QR_SETTLE_READS) and follows the session when it starts again; it
        # stopped at STOPPED before (CI saw it once).
        def logouts():
            return len([q for q in srv.sim.requests("whatsapp_qr") if q.get("path", "").endswith("/logout")])
        srv.sim._call("PUT", "/__sim/waha/settings", {"actionAnswerMs": 1000})
        n = logouts()
        click(d, "#qr-logout")
        accept_confirm(d)
        wait(d, lambda _: logouts() > n)
        srv.sim._call("POST", "/__sim/waha/sessions/default/status", {"status": "STOPPED"})
        wait(d, lambda _: qr_status(d) == "STOPPED", 12)
        srv.sim._call("PUT", "/__sim/waha/settings", {"actionAnswerMs": 0})
        srv.sim._call("POST", "/__sim/waha/sessions/default/status", {"status": "STARTING"})
        wait(d, lambda _: qr_status(d) == "SCAN_QR_CODE", 12)
        wait(d, lambda _: canvas(d)[0])

        # The PNG travelled with the token in its header only; no other tab reads it on.
        urls = assert_tenant_only_requests(d, origin, keys["token"])
        assert any(urllib.parse.urlsplit(u).path == "/api/whatsapp/sessions/default/qr" for u in urls)
        assert not [u for u in urls if u.startswith("blob:")]

        # The admin console shows the same session through the admin mirrors.
        click(d, "#signout")
        fill(d, "#signin-token", ADMIN_TOKEN).send_keys(Keys.ENTER)
        fill(d, "#search-name", "QR Shop").send_keys(Keys.ENTER)
        wait(d, lambda _: texts(d, "#tenant-table tbody tr") == ["QR Shop"])
        click(d, "#tenant-table tbody tr button")
        wait(d, lambda _: d.find_element(By.ID, "tenant-id").text == t["id"])
        tab(d, "qr")
        wait(d, lambda _: qr_status(d) == "SCAN_QR_CODE")
        wait(d, lambda _: canvas(d)[0])
        assert any(urllib.parse.urlsplit(u).path == "/admin/tenants/%s/whatsapp/sessions/default/qr" % t["id"]
                   for u in page_requests(d, origin))
    finally:
        srv.sim.stop()

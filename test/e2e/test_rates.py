"""Issue 34, first step: rate cards (API.md §22). The global card through GET and PUT
/admin/rates, and a tenant's card in its settings, checked by the same rules; against the real
binary and the real PostgreSQL. (What an attempt costs comes with the next step.)"""

import copy

from conftest import assert_error, assert_ok, wait_for
from gwlib import SETTINGS_ALL, admin, call, new_tenant, new_token

CARD = {"currency": "USD", "rates": [
    {"channel": "sms", "prefix": "", "price": "0.0500"},
    {"channel": "sms", "prefix": "+62", "price": "0.03"},
    {"channel": "whatsapp_meta", "prefix": "+62", "price": "0.004"},
    {"channel": "whatsapp_meta", "prefix": "+62", "price": "0.0360", "category": "marketing"}]}


def ready(make_gateway):
    gw = make_gateway()
    assert wait_for(lambda: gw.request("GET", "/readyz").status == 200, 10)
    return gw


def test_global_card_put_get(make_gateway):
    """Before any PUT the card is empty (no currency); a PUT replaces it whole and answers it as
    stored, which GET then returns; a second PUT replaces the first."""
    gw = ready(make_gateway)
    j = assert_ok(admin(gw, "GET", "/admin/rates"))
    assert j["data"] == {"currency": None, "rates": [], "updatedAt": None}, j
    put = assert_ok(admin(gw, "PUT", "/admin/rates", CARD))["data"]
    assert put["currency"] == "USD" and put["rates"] == CARD["rates"] and put["updatedAt"], put
    assert assert_ok(admin(gw, "GET", "/admin/rates"))["data"] == put
    other = {"currency": "EUR", "rates": [{"channel": "whatsapp_qr", "prefix": "", "price": "0"}]}
    put2 = assert_ok(admin(gw, "PUT", "/admin/rates", other))["data"]
    assert put2["currency"] == "EUR" and put2["rates"] == other["rates"], put2
    assert assert_ok(admin(gw, "GET", "/admin/rates"))["data"] == put2


def test_global_card_refused(make_gateway):
    """Every rule of a card, each a 422 naming the field, and nothing stored; the admin token is
    required."""
    gw = ready(make_gateway)
    assert_ok(admin(gw, "PUT", "/admin/rates", CARD))
    before = assert_ok(admin(gw, "GET", "/admin/rates"))["data"]
    bad = [
        ({"currency": "usd", "rates": []}, "validation_failed", "currency"),
        ({"currency": "USD"}, "validation_failed", "rates"),
        ({"currency": "USD", "rates": [{"channel": "email", "prefix": "", "price": "1"}]}, "validation_failed",
         "rates[0]"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "62", "price": "1"}]}, "validation_failed",
         "rates[0]"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "+62", "price": "0.0000001"}]},
         "validation_failed", "rates[0]"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "+62", "price": 0.03}]}, "validation_failed",
         "rates[0]"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "+62", "price": "1", "category": "utility"}]},
         "validation_failed", "rates[0]"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "+62", "price": "1"},
                                       {"channel": "sms", "prefix": "+62", "price": "2"}]},
         "validation_failed", "rates"),
        ({"currency": "USD", "rates": [{"channel": "sms", "prefix": "", "price": "1", "note": "x"}]},
         "unknown_field", "rates[0]"),
        ({"currency": "USD", "rates": [], "vat": "0.2"}, "unknown_field", "vat"),
    ]
    for body, code, field in bad:
        assert_error(admin(gw, "PUT", "/admin/rates", body), 422, code, field)
    assert_error(call(gw, "PUT", "/admin/rates", token="not-the-admin", body=CARD), 401, "unauthorized")
    assert_error(call(gw, "GET", "/admin/rates", token="not-the-admin"), 401, "unauthorized")
    assert assert_ok(admin(gw, "GET", "/admin/rates"))["data"] == before


def test_tenant_card_in_settings(make_gateway):
    """A tenant's card is its settings' `rates`, checked by the same rules (fields named below
    settings.rates) and shown back as given."""
    gw = ready(make_gateway)
    settings = copy.deepcopy(SETTINGS_ALL)
    settings["rates"] = {"currency": "USD", "rates": [{"channel": "sms", "prefix": "+49", "price": "0.0700"}]}
    t = new_tenant(gw, settings=settings)
    assert t["settings"]["rates"] == settings["rates"], t
    bad = copy.deepcopy(settings)
    bad["rates"]["rates"][0]["price"] = "cheap"
    assert_error(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": bad}), 422, "validation_failed",
                 "settings.rates.rates[0]")
    bad["rates"] = {"currency": "USD", "rates": [], "x": 1}
    assert_error(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": bad}), 422, "unknown_field",
                 "settings.rates.x")
    got = assert_ok(admin(gw, "GET", "/admin/tenants/%s" % t["id"]))["data"]
    assert got["settings"]["rates"] == settings["rates"], got
    token = new_token(gw, t["id"])["token"]
    assert_error(call(gw, "GET", "/admin/rates", token=token), 401, "unauthorized")


def test_one_currency(make_gateway):
    """A tenant's card must be in the global card's currency (422 on settings.rates.currency, for
    a new tenant and a change); a global card in another currency than tenants' cards is 409 and
    leaves the card as it was. Without a global card any currency goes."""
    gw = ready(make_gateway)
    settings = copy.deepcopy(SETTINGS_ALL)
    settings["rates"] = {"currency": "EUR", "rates": [{"channel": "sms", "prefix": "", "price": "0.06"}]}
    t = new_tenant(gw, settings=settings)  # no global card yet
    assert_error(admin(gw, "PUT", "/admin/rates", CARD), 409, "conflict", "currency")
    assert assert_ok(admin(gw, "GET", "/admin/rates"))["data"]["currency"] is None
    assert_ok(admin(gw, "PUT", "/admin/rates", dict(CARD, currency="EUR")))
    usd = copy.deepcopy(settings)
    usd["rates"]["currency"] = "USD"
    assert_error(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": usd}), 422, "validation_failed",
                 "settings.rates.currency")
    assert_error(admin(gw, "POST", "/admin/tenants", {"name": "usd", "settings": usd}), 422, "validation_failed",
                 "settings.rates.currency")
    assert assert_ok(admin(gw, "GET", "/admin/tenants/%s" % t["id"]))["data"]["settings"]["rates"]["currency"] == "EUR"
    # Tenants without a card of their own do not hold the global card's currency back (settings
    # are merge-patched: null removes the card).
    new_tenant(gw, settings=SETTINGS_ALL, name="plain")
    got = assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": {"rates": None}}))["data"]
    assert "rates" not in got["settings"], got
    assert_ok(admin(gw, "PUT", "/admin/rates", CARD))

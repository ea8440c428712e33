/*
 * The Omnigate console (docs/console.md): one page, plain JavaScript, talking to the gateway's
 * own API with fetch. Served with a strict CSP: no inline script or style, no eval; the DOM is
 * built with createElement (and createElementNS for the usage charts' SVG) and textContent only,
 * so no value from the API is ever parsed as HTML.
 *
 * Two ways in, one page. Signed in with the admin token, it is the admin console (API.md §5, §12,
 * §17, §18, §19, §21, §22): every tenant, through the admin API and its mirrors of the tenant
 * API. Signed in with a tenant token that has scope keys, it is that tenant's console (API.md
 * §23): the same views of one tenant, through the tenant API itself (tenantPath), and never a
 * request to /admin (api() refuses one), so it can show nothing of another tenant.
 *
 * The token lives in sessionStorage only (gone when the tab closes): never in a URL, a cookie,
 * localStorage or a log line. Requests carry it in the Authorization header.
 */
(function () {
  "use strict";

  var STORE_KEY = "omnigate.adminToken";    // the admin token, when signed in as the admin
  var TENANT_KEY = "omnigate.tenantToken";  // a tenant token, when signed in as a tenant
  var CHANNELS = ["whatsapp_qr", "whatsapp_meta", "sms"];
  var EVENTS = ["message.sent", "message.failed", "message.delivered", "message.read",
    "message.undelivered", "message.canceled", "message.expired", "otp.verified", "otp.locked",
    "batch.completed", "message.received", "recipient.opted_out", "recipient.opted_in"];
  var SCOPES = ["send", "otp", "logs", "keys"];
  // What each tab of a tenant shows, by the scope a tenant token needs for it (index.html's
  // data-scope), for the line that says which tabs a token without it does not get.
  var SCOPE_TABS = { send: "Templates, Suppressions", logs: "Logs, Inbound, Recipient, Usage" };

  // The tenant's routes: [the admin mirror under /admin/tenants/{id}, the tenant API under /api].
  var ROUTES = {
    tokens: ["/tokens", "/tokens"],
    webhook: ["/webhook", "/webhook"],
    deliveries: ["/webhook/deliveries", "/webhooks/deliveries"],
    templates: ["/templates", "/whatsapp/templates"],
    omniLogs: ["/omni/logs", "/omni/logs"],
    smsLogs: ["/sms/logs", "/sms/logs"],
    otpLogs: ["/otp/logs", "/sms/otp/logs"],
    batches: ["/batches", "/omni/batches"],
    inbound: ["/inbound", "/inbound"],
    suppressions: ["/suppressions", "/suppressions"],
    recipients: ["/recipients", "/recipients"],
    usage: ["/usage", "/usage"],
    sessions: ["/whatsapp/sessions", "/whatsapp/sessions"]
  };
  var STATUSES = {
    omni: ["pending", "sent", "failed", "unknown", "delivered", "read", "undelivered", "queued", "scheduled",
      "canceled", "expired"],
    sms: ["sent", "failed", "delivered", "read", "undelivered"],
    otp: ["pending", "verified", "expired", "locked", "failed", "superseded"],
    deliveries: ["pending", "delivered", "failed", "exhausted"]
  };
  // A unified log status as a badge (the word is always written, the colour only repeats it):
  // green, a provider took it; blue, not finished yet (due later, waiting for its sender's rate,
  // an attempt in flight); amber, its outcome is not known; red, it did not get there; grey,
  // canceled before any provider was called.
  var OMNI_BADGE = {
    sent: "good", delivered: "good", read: "good", queued: "info", scheduled: "info", pending: "info",
    unknown: "warn", failed: "bad", undelivered: "bad", expired: "bad", canceled: "neutral"
  };

  var state = {
    mode: "admin",     // "admin" or "tenant": which token is signed in
    tenantsCursor: null,
    tenantsName: "",
    tenant: null,      // the tenant open, as the API answered it
    logKind: "omni",
    logQuery: "",
    logBatch: "",
    logCursor: null,
    tplQuery: "",
    tplCursor: null,
    rcpSeq: 0,         // the recipient read last asked for; an older answer is dropped
    qr: { name: "", seq: 0, timer: 0 } // the QR session shown, its last read, the next read's timer
  };

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "className") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function show(node, on) { node.hidden = !on; }

  function token() { return sessionStorage.getItem(state.mode === "tenant" ? TENANT_KEY : STORE_KEY); }

  // A route of the tenant shown: the admin mirror for the tenant open, or the tenant API itself
  // when a tenant token is signed in.
  function tenantPath(name) {
    var r = ROUTES[name];
    return state.mode === "tenant" ? "/api" + r[1] : "/admin/tenants/" + state.tenant.id + r[0];
  }

  function status(msg) { $("status").textContent = msg || ""; }

  // ---- the API ------------------------------------------------------------------------------

  function request(method, path, body, tok, accept) {
    var headers = { "Accept": accept, "Authorization": "Bearer " + (tok || token() || "") };
    var init = { method: method, headers: headers, credentials: "omit", cache: "no-store",
      referrerPolicy: "no-referrer", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init);
  }

  function refused(r, tok) {
    if (r.status === 401 && !tok) {
      signOut(state.mode === "tenant" ? "Your session ended: the tenant token was refused (revoked?)." :
        "Your session ended: the admin token was refused.");
    }
  }

  function unreachable() { return { status: 0, body: { message: "the gateway could not be reached" } }; }

  // A tenant token never reads the admin API: whatever a bug asks, nothing is sent.
  function forbidden(path) {
    return state.mode === "tenant" && !/^\/api\//.test(path) ?
      { status: 0, body: { message: "not a route of the tenant API: " + path } } : null;
  }

  // Resolves to {status, body}; a 401 signs out (the token is wrong or was changed).
  function api(method, path, body, tok) {
    var no = forbidden(path);
    if (no) return Promise.resolve(no);
    return request(method, path, body, tok, "application/json").then(function (r) {
      return r.text().then(function (t) {
        var j = null;
        try { j = t ? JSON.parse(t) : null; } catch (e) { j = null; }
        refused(r, tok);
        return { status: r.status, body: j };
      });
    }, unreachable);
  }

  // A binary answer (the QR code's PNG): {status, blob} on 200, else {status, body} as api().
  function apiBlob(path) {
    var no = forbidden(path);
    if (no) return Promise.resolve(no);
    return request("GET", path, undefined, null, "image/png, application/json").then(function (r) {
      if (r.status === 200) return r.blob().then(function (b) { return { status: 200, blob: b }; });
      return r.text().then(function (t) {
        var j = null;
        try { j = t ? JSON.parse(t) : null; } catch (e) { j = null; }
        refused(r, null);
        return { status: r.status, body: j };
      });
    }).catch(unreachable);
  }

  function messageOf(res) {
    return (res.body && res.body.message) || ("request failed (HTTP " + res.status + ")");
  }

  function q(params) {
    var parts = [];
    Object.keys(params).forEach(function (k) {
      var v = params[k];
      if (v !== "" && v !== null && v !== undefined) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    });
    return parts.join("&");
  }

  // ---- errors next to their field --------------------------------------------------------------

  function clearErrors(form) {
    form.querySelectorAll(".field-error, .error").forEach(function (p) { p.textContent = ""; p.hidden = true; });
    form.querySelectorAll("[aria-invalid]").forEach(function (i) { i.removeAttribute("aria-invalid"); });
  }

  // Shows an API failure: next to the field error.field names (the longest data-field that is a
  // prefix of it, as in "settings.channels.sms.senders[1]"), else under the form.
  function showError(form, res) {
    var err = res.body && res.body.error;
    var field = err && err.field;
    var best = null;
    if (field) {
      form.querySelectorAll("[data-field]").forEach(function (f) {
        var name = f.getAttribute("data-field");
        var next = field.charAt(name.length);
        if (field.indexOf(name) === 0 && (next === "" || next === "." || next === "[") && !f.hidden &&
            (!best || name.length > best.getAttribute("data-field").length)) best = f;
      });
    }
    var text = messageOf(res) + (err && err.code ? " (" + err.code + ")" : "");
    if (best) {
      // The field's own line: a group (a template's name and language) holds its members' too.
      var p = best.querySelector(":scope > .field-error") || best.querySelector(".field-error");
      p.textContent = text;
      p.hidden = false;
      var input = best.querySelector("input, select, textarea");
      if (input) {
        input.setAttribute("aria-invalid", "true");
        if (p.id === "") p.id = "err-" + Math.random().toString(36).slice(2);
        var described = input.getAttribute("aria-describedby") || ""; // a hint stays
        if (described.split(" ").indexOf(p.id) < 0) input.setAttribute("aria-describedby", (described + " " + p.id).trim());
        input.focus();
      }
      return;
    }
    var general = form.querySelector(".error");
    general.textContent = text;
    general.hidden = false;
  }

  // ---- sign in / out ------------------------------------------------------------------------------

  function signOut(why) {
    sessionStorage.removeItem(STORE_KEY);
    sessionStorage.removeItem(TENANT_KEY);
    stopQr();
    state.mode = "admin";
    state.tenant = null;
    show($("app"), false);
    show($("signout"), false);
    show($("signin"), true);
    var e = $("signin-error");
    e.textContent = why || "";
    e.hidden = !why;
    $("signin-token").value = "";
    $("signin-token").focus();
  }

  // Shows the parts of the page of one mode: [data-mode] elements are the admin's or a tenant's.
  function setMode(mode) {
    state.mode = mode;
    document.querySelectorAll("[data-mode]").forEach(function (n) { show(n, n.getAttribute("data-mode") === mode); });
    $("tab-tokens").textContent = mode === "tenant" ? "Unified API" : "Tokens";
    if (mode === "admin") {
      // What a tenant token's scopes and plan hid: the admin sees all of it.
      document.querySelectorAll(".tab[data-scope]").forEach(function (b) { show(b, true); });
      show($("tabs-hidden"), false);
      show($("token-locked"), false);
      show($("token-form"), true);
      SCOPES.forEach(function (scope) { show($("scope-" + scope).parentNode, true); });
    }
  }

  function signedIn() {
    setMode("admin");
    show($("signin"), false);
    show($("app"), true);
    show($("signout"), true);
    openTenants();
  }

  // A tenant token with scope keys: that tenant's console (`t` is its GET /api/tenant).
  function signedInTenant(t) {
    setMode("tenant");
    show($("signin"), false);
    show($("app"), true);
    show($("signout"), true);
    show($("tenants"), false);
    show($("usage"), false);
    show($("tenant"), true);
    forgetRecipient();
    forgetQr();
    setTenantSelf(t);
    selectTab("tokens");
    $("tenant-h").focus();
  }

  function hasScope(t, scope) { return (t.scopes || []).indexOf(scope) >= 0; }

  function noKeysMessage(t) {
    return "This console needs a token with the keys scope. This token of " + t.name + " has " +
      ((t.scopes || []).join(", ") || "no scope") + ": ask an administrator for one with keys, " +
      "or create one with a token that has it.";
  }

  function onSignIn(ev) {
    ev.preventDefault();
    var tok = $("signin-token").value.trim();
    var e = $("signin-error");
    var refuse = function (text) {
      e.textContent = text;
      e.hidden = false;
      $("signin-token").focus();
    };
    e.hidden = true;
    if (!tok) return refuse("Enter the admin token or a tenant token.");
    // Checked with a harmless read before it is kept: a tenant token first (GET /api/tenant
    // answers any valid one), else the admin token as before.
    api("GET", "/api/tenant", undefined, tok).then(function (res) {
      if (res.status === 200) {
        var t = res.body.data;
        if (!hasScope(t, "keys")) return refuse(noKeysMessage(t));
        sessionStorage.removeItem(STORE_KEY);
        sessionStorage.setItem(TENANT_KEY, tok);
        $("signin-token").value = "";
        return signedInTenant(t);
      }
      if (res.status !== 401) return refuse(messageOf(res));
      api("GET", "/admin/tenants?limit=1", undefined, tok).then(function (adm) {
        if (adm.status === 200) {
          sessionStorage.removeItem(TENANT_KEY);
          sessionStorage.setItem(STORE_KEY, tok);
          $("signin-token").value = "";
          signedIn();
        } else {
          refuse(adm.status === 401 ? "Wrong admin token or tenant token: the gateway knows neither." : messageOf(adm));
        }
      });
    });
  }

  // A page loaded again with a tenant token kept: who it is, read again.
  function resumeTenant() {
    state.mode = "tenant";
    api("GET", "/api/tenant").then(function (res) {
      if (state.mode !== "tenant" || !token()) return;
      if (res.status === 200 && hasScope(res.body.data, "keys")) return signedInTenant(res.body.data);
      if (res.status === 200) return signOut(noKeysMessage(res.body.data));
      if (res.status !== 401) signOut(messageOf(res));
    });
  }

  // ---- tenants ------------------------------------------------------------------------------------

  function openTenants() {
    markView("tenants");
    show($("usage"), false);
    show($("tenant"), false);
    show($("tenants"), true);
    state.tenant = null;
    loadTenants(false);
  }

  function loadTenants(more) {
    var params = { limit: 20, name: state.tenantsName, cursor: more ? state.tenantsCursor : "" };
    api("GET", "/admin/tenants?" + q(params)).then(function (res) {
      var body = $("tenant-table").tBodies[0];
      if (!more) body.textContent = "";
      if (res.status !== 200) {
        status(messageOf(res));
        return;
      }
      res.body.data.items.forEach(function (t) {
        var open = el("button", { type: "button", text: "Open" });
        open.setAttribute("aria-label", "Open tenant " + t.name);
        open.addEventListener("click", function () { openTenant(t.id); });
        body.appendChild(el("tr", null, [
          el("td", { "data-label": "Name", text: t.name }),
          el("td", { "data-label": "Unified API", text: t.unifiedApiEnabled ? "enabled" : "locked" }),
          el("td", { "data-label": "Created", text: t.createdAt }),
          el("td", { "data-label": "Id" }, [el("code", { text: t.id })]),
          el("td", null, [open])
        ]));
      });
      state.tenantsCursor = res.body.data.nextCursor;
      show($("tenant-more"), !!state.tenantsCursor);
      show($("tenant-empty"), body.rows.length === 0);
    });
  }

  function onSearch(ev) {
    ev.preventDefault();
    state.tenantsName = $("search-name").value.trim();
    loadTenants(false);
  }

  function onCreate(ev) {
    ev.preventDefault();
    var form = $("create-form");
    clearErrors(form);
    var body = { name: $("create-name").value, unifiedApiEnabled: $("create-unified").checked };
    api("POST", "/admin/tenants", body).then(function (res) {
      if (res.status !== 201) return showError(form, res);
      form.reset();
      $("create-tenant").open = false;
      status("Tenant " + res.body.data.name + " created.");
      openTenant(res.body.data.id);
    });
  }

  // ---- one tenant -----------------------------------------------------------------------------------

  function openTenant(id) {
    api("GET", "/admin/tenants/" + encodeURIComponent(id)).then(function (res) {
      if (res.status !== 200) return status(messageOf(res));
      show($("tenants"), false);
      show($("tenant"), true);
      forgetRecipient();
      forgetQr();
      setTenant(res.body.data);
      selectTab("settings");
      $("tenant-h").focus();
    });
  }

  function setTenant(t) {
    state.tenant = t;
    $("tenant-h").textContent = t.name;
    $("tenant-id").textContent = t.id;
    fillSettings(t);
  }

  // The tenant of the token signed in, as GET /api/tenant says: its name, its plan lock, and the
  // token's scopes, which choose the tabs (a tab needing a scope the token lacks is not shown).
  function setTenantSelf(t) {
    state.tenant = t;
    $("tenant-h").textContent = t.name;
    $("tenant-id").textContent = t.id;
    $("tenant-who").textContent = "Signed in with a token of this tenant, scopes " + t.scopes.join(", ") +
      ". The unified API is " + (t.unifiedApiEnabled ? "enabled" : "not enabled (locked by the plan)") + ".";
    var missing = [];
    document.querySelectorAll(".tab[data-scope]").forEach(function (b) {
      var scope = b.getAttribute("data-scope");
      show(b, hasScope(t, scope));
      if (!hasScope(t, scope) && missing.indexOf(scope) < 0) missing.push(scope);
    });
    var note = $("tabs-hidden");
    note.textContent = missing.map(function (scope) {
      return SCOPE_TABS[scope] + ": need a token with scope " + scope + ".";
    }).join(" ");
    show(note, missing.length > 0);
    showLock(t);
  }

  // The Unified API tab of a tenant token: the form to create a token, or, while the plan
  // locks the unified API, the notice that an administrator must enable it. The scopes offered
  // are the token's own (it can grant no other).
  function showLock(t) {
    var locked = !t.unifiedApiEnabled;
    show($("token-locked"), locked);
    show($("token-form"), !locked);
    SCOPES.forEach(function (scope) { show($("scope-" + scope).parentNode, hasScope(t, scope)); });
  }

  // `focus`: move focus to what the tab shows once it is loaded (a recipient opened from a number).
  function selectTab(name, focus) {
    status("");
    if (name !== "qr") stopQr();
    document.querySelectorAll(".tab").forEach(function (b) {
      var on = b.getAttribute("data-tab") === name;
      b.setAttribute("aria-pressed", on ? "true" : "false");
      show($("panel-" + b.getAttribute("data-tab")), on);
    });
    if (name === "tokens") {
      loadTokens();
      if (state.mode === "tenant") refreshLock();
    }
    if (name === "webhook") loadWebhook();
    if (name === "templates") onTemplates();
    if (name === "logs") setLogKind($("log-kind").value);
    if (name === "inbound") onInbound();
    if (name === "suppressions") onSuppressions();
    if (name === "recipient") loadRecipient($("rcp-to").value, !!focus);
    if (name === "usage") loadUsage(usageViews.tenant, tenantPath("usage"));
    if (name === "qr") loadQr($("qr-name").value, !!focus);
  }

  // The plan lock read again (an administrator may have lifted it since the sign-in).
  function refreshLock() {
    api("GET", "/api/tenant").then(function (res) {
      if (res.status === 200 && state.mode === "tenant") setTenantSelf(res.body.data);
    });
  }

  // -- settings

  function channel(s, name) { return (s.channels && s.channels[name]) || {}; }

  function fillSettings(t) {
    var s = t.settings || {};
    $("set-name").value = t.name;
    $("set-unified").checked = !!t.unifiedApiEnabled;
    $("set-default-channels").value = (s.defaultChannels || []).join(", ");
    $("set-default-from").value = s.defaultWhatsappFrom || "";
    $("set-rate").value = s.rateLimitPerSecond === undefined ? "" : s.rateLimitPerSecond;
    var qr = channel(s, "whatsapp_qr"), meta = channel(s, "whatsapp_meta"), sms = channel(s, "sms");
    $("set-qr-enabled").checked = !!qr.enabled;
    $("set-meta-enabled").checked = !!meta.enabled;
    $("set-sms-enabled").checked = !!sms.enabled;
    $("set-qr-numbers").value = Object.keys(qr.numbers || {}).map(function (n) {
      return n + " " + (qr.numbers[n].session || "");
    }).join("\n");
    $("set-meta-numbers").value = Object.keys(meta.numbers || {}).map(function (n) {
      var v = meta.numbers[n];
      return n + " " + (v.phoneNumberId || "") + " " + (v.accessToken || "") + (v.wabaId ? " " + v.wabaId : "");
    }).join("\n");
    $("set-meta-outside").value = meta.outsideWindow || "send";
    var wt = meta.windowTemplate || {}, ot = (s.otp && s.otp.whatsappTemplate) || {};
    $("set-meta-wt-name").value = wt.name || "";
    $("set-meta-wt-lang").value = wt.language || "";
    $("set-otp-wt-name").value = ot.name || "";
    $("set-otp-wt-lang").value = ot.language || "";
    $("set-sms-senders").value = (sms.senders || []).join(", ");
    $("set-sms-default").value = sms.defaultSender || "";
  }

  function list(text) {
    return text.split(",").map(function (x) { return x.trim(); }).filter(function (x) { return x !== ""; });
  }

  // number -> object from "number field field" lines; `keys` names the fields.
  function numbers(text, keys) {
    var out = {};
    text.split("\n").forEach(function (line) {
      var w = line.trim().split(/\s+/);
      if (w[0] === "") return;
      var o = {};
      keys.forEach(function (k, i) { if (w[i + 1] !== undefined) o[k] = w[i + 1]; });
      out[w[0]] = o;
    });
    return out;
  }

  // A {name, language} template reference from two inputs, or null (removed) when both are empty.
  function templateRef(nameId, langId) {
    var name = $(nameId).value.trim(), language = $(langId).value.trim();
    return name === "" && language === "" ? null : { name: name, language: language };
  }

  // A JSON merge patch (RFC 7396) turning the stored numbers into `want`: removed ones are null.
  function numbersPatch(stored, want) {
    var p = {};
    Object.keys(stored || {}).forEach(function (n) { if (!(n in want)) p[n] = null; });
    Object.keys(want).forEach(function (n) { p[n] = want[n]; });
    return p;
  }

  function onSaveSettings(ev) {
    ev.preventDefault();
    var form = $("settings-form");
    clearErrors(form);
    var s = state.tenant.settings || {};
    var rate = $("set-rate").value.trim();
    var from = $("set-default-from").value.trim();
    var dflt = $("set-sms-default").value.trim();
    var metaNumbers = numbers($("set-meta-numbers").value, ["phoneNumberId", "accessToken", "wabaId"]);
    // A line without a wabaId removes the stored one.
    Object.keys(metaNumbers).forEach(function (n) { if (!metaNumbers[n].wabaId) metaNumbers[n].wabaId = null; });
    var outside = $("set-meta-outside").value;
    var settings = {
      defaultChannels: list($("set-default-channels").value),
      defaultWhatsappFrom: from === "" ? null : from,
      rateLimitPerSecond: rate === "" ? null : Number(rate),
      channels: {
        whatsapp_qr: { enabled: $("set-qr-enabled").checked,
          numbers: numbersPatch(channel(s, "whatsapp_qr").numbers, numbers($("set-qr-numbers").value, ["session"])) },
        whatsapp_meta: { enabled: $("set-meta-enabled").checked,
          numbers: numbersPatch(channel(s, "whatsapp_meta").numbers, metaNumbers),
          outsideWindow: outside === "send" ? null : outside, // absent is send
          windowTemplate: templateRef("set-meta-wt-name", "set-meta-wt-lang") },
        sms: { enabled: $("set-sms-enabled").checked, senders: list($("set-sms-senders").value),
          defaultSender: dflt === "" ? null : dflt }
      }
    };
    var otpTemplate = templateRef("set-otp-wt-name", "set-otp-wt-lang");
    if (otpTemplate || s.otp) settings.otp = { whatsappTemplate: otpTemplate };
    var body = { name: $("set-name").value, unifiedApiEnabled: $("set-unified").checked, settings: settings };
    api("PATCH", "/admin/tenants/" + state.tenant.id, body).then(function (res) {
      if (res.status !== 200) return showError(form, res);
      setTenant(res.body.data);
      status("Settings saved.");
    });
  }

  // -- tokens

  // The token this console is signed in with, as a tenant (its prefix is its first characters).
  function isOwnToken(t) {
    var mine = state.mode === "tenant" ? token() : null;
    return !!mine && !!t.prefix && mine.indexOf(t.prefix) === 0;
  }

  function loadTokens() {
    api("GET", tenantPath("tokens")).then(function (res) {
      var body = $("token-table").tBodies[0];
      body.textContent = "";
      if (res.status !== 200) return status(messageOf(res));
      res.body.data.items.forEach(function (t) {
        var revoke = null, own = isOwnToken(t);
        if (!t.revokedAt) {
          revoke = el("button", { type: "button", className: "danger", text: "Revoke" });
          revoke.setAttribute("aria-label", "Revoke token " + (t.name || t.prefix));
          revoke.addEventListener("click", function () { revokeToken(t, own); });
        }
        body.appendChild(el("tr", own ? { "data-own": "true" } : null, [
          el("td", { "data-label": "Name" }, [t.name || "(no name)",
            own ? el("span", { className: "badge info own", text: "this console" }) : null]),
          el("td", { "data-label": "Prefix" }, [el("code", { text: t.prefix })]),
          el("td", { "data-label": "Scopes", text: t.scopes.join(", ") }),
          el("td", { "data-label": "Created" }, [stamp(t.createdAt)]),
          el("td", { "data-label": "Last used" }, [t.lastUsedAt ? stamp(t.lastUsedAt) : "never"]),
          el("td", { "data-label": "Revoked" }, [t.revokedAt ? stamp(t.revokedAt) : "no"]),
          el("td", null, [revoke])
        ]));
      });
    });
  }

  function onCreateToken(ev) {
    ev.preventDefault();
    var form = $("token-form");
    clearErrors(form);
    var scopes = [];
    form.querySelectorAll("input[type=checkbox]").forEach(function (c) {
      if (c.checked && !c.parentNode.hidden) scopes.push(c.value);
    });
    var body = { scopes: scopes };
    var name = $("token-name").value.trim();
    if (name) body.name = name;
    api("POST", tenantPath("tokens"), body).then(function (res) {
      var err = res.body && res.body.error;
      if (res.status === 403 && err && err.code === "unified_api_locked" && state.mode === "tenant") {
        state.tenant.unifiedApiEnabled = false; // locked since the page read it
        setTenantSelf(state.tenant);
        return;
      }
      if (res.status !== 201) return showError(form, res);
      form.reset();
      $("token-value").value = res.body.data.token;
      show($("token-once"), true);
      $("token-value").focus();
      $("token-value").select();
      loadTokens();
    });
  }

  function revokeToken(t, own) {
    if (!window.confirm("Revoke token " + (t.name || t.prefix) + "? Requests with it will be refused." +
        (own ? " It is the token this console is signed in with: you will be signed out." : ""))) return;
    api("DELETE", tenantPath("tokens") + "/" + encodeURIComponent(t.id)).then(function (res) {
      // The gateway may still take it for a second or two (API.md §1): signed out now, not then.
      if (res.status === 200 && own) return signOut("You revoked the tenant token this console was signed in with.");
      status(res.status === 200 ? "Token " + t.prefix + " revoked." : messageOf(res));
      loadTokens();
    });
  }

  function forget(boxId, inputId) {
    $(inputId).value = "";
    show($(boxId), false);
    var copy = $(boxId).querySelector(".copy");
    if (copy) copy.textContent = "Copy";
  }

  // Copies an input's value: with the Clipboard API where the page may use it, else the text is
  // selected (and copied by the browser's own command where it still has one) for Ctrl+C.
  function copyFrom(inputId, button) {
    var input = $(inputId);
    var done = function () {
      button.textContent = "Copied";
      status("Copied to the clipboard.");
    };
    var select = function () {
      input.focus();
      input.select();
      var copied = false;
      try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
      if (copied) done();
      else status("Selected: press Ctrl+C (or Cmd+C) to copy it.");
    };
    if (navigator.clipboard && navigator.clipboard.writeText && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(done, select);
    } else {
      select();
    }
  }

  // -- webhook

  function buildEventBoxes() {
    var fs = $("webhook-events");
    EVENTS.forEach(function (name) {
      var id = "event-" + name.replace(".", "-");
      fs.insertBefore(el("span", { className: "check" }, [
        el("input", { id: id, type: "checkbox", value: name }),
        el("label", { "for": id, text: name })
      ]), fs.querySelector(".field-error"));
    });
  }

  // The secret as GET shows it: a full one (just created or rotated) is shown in its own box only.
  function masked(secret) {
    return !secret || secret.indexOf("****") >= 0 ? secret : "whsec_****" + secret.slice(-4);
  }

  function fillWebhook(w) {
    var form = $("webhook-form");
    $("webhook-url").value = w ? w.url : "";
    form.querySelectorAll("#webhook-events input").forEach(function (c) {
      c.checked = !!w && w.events.length < EVENTS.length && w.events.indexOf(c.value) >= 0;
    });
    var st = "No webhook yet.";
    if (w) {
      st = (w.enabled === false ? "Disabled" + (w.disabledReason ? " (" + w.disabledReason + ")" : "") : "Enabled") +
        ". Secret " + masked(w.secret) + ". Updated " + (w.updatedAt || w.createdAt) + ".";
    }
    $("webhook-state").textContent = st;
    show($("webhook-rotate"), !!w);
    show($("webhook-delete"), !!w);
  }

  function showSecret(w) {
    if (w && w.secret && w.secret.indexOf("****") < 0) {
      $("secret-value").value = w.secret;
      show($("secret-once"), true);
      $("secret-value").focus();
      $("secret-value").select();
    }
  }

  function webhookPath() { return tenantPath("webhook"); }

  function loadWebhook() {
    api("GET", webhookPath()).then(function (res) {
      if (res.status === 200) fillWebhook(res.body.data);
      else if (res.status === 404) fillWebhook(null);
      else status(messageOf(res));
    });
  }

  function onSaveWebhook(ev) {
    ev.preventDefault();
    var form = $("webhook-form");
    clearErrors(form);
    var events = [];
    form.querySelectorAll("#webhook-events input").forEach(function (c) { if (c.checked) events.push(c.value); });
    var body = { url: $("webhook-url").value.trim() };
    if (events.length) body.events = events;
    api("PUT", webhookPath(), body).then(function (res) {
      if (res.status !== 200) return showError(form, res);
      fillWebhook(res.body.data);
      showSecret(res.body.data);
      status("Webhook saved.");
    });
  }

  function onRotate() {
    if (!window.confirm("Rotate the signing secret? The old one stops signing at once.")) return;
    api("POST", webhookPath() + "/rotate-secret").then(function (res) {
      if (res.status !== 200) return showError($("webhook-form"), res);
      fillWebhook(res.body.data);
      showSecret(res.body.data);
      status("Secret rotated.");
    });
  }

  function onDeleteWebhook() {
    if (!window.confirm("Delete the webhook?")) return;
    api("DELETE", webhookPath()).then(function (res) {
      if (res.status !== 200) return showError($("webhook-form"), res);
      fillWebhook(null);
      status("Webhook deleted.");
    });
  }

  // -- WhatsApp templates (API.md §18)

  // APPROVED is green; a template that may come back (paused by Meta for its quality, in review)
  // amber; one that cannot be sent until someone acts on it, red.
  var TPL_BADGE = {
    APPROVED: "good", PENDING: "warn", PAUSED: "warn", IN_APPEAL: "warn", LIMIT_EXCEEDED: "warn",
    REJECTED: "bad", DISABLED: "bad", MISSING: "bad", PENDING_DELETION: "bad", DELETED: "bad"
  };

  function templatesPath() { return tenantPath("templates"); }

  // `text` into `parent` as text nodes, each placeholder ({{1}}, {{first_name}}) in a <mark>.
  function withPlaceholders(parent, text) {
    var re = /\{\{\s*[A-Za-z0-9_]+\s*\}\}/g, last = 0, m;
    text = text === null || text === undefined ? "" : String(text);
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      parent.appendChild(el("mark", { className: "ph", text: m[0] }));
      last = re.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
    return parent;
  }

  function templateButtons(buttons) {
    if (!buttons || !buttons.length) return el("span", { className: "muted", text: "none" });
    return el("ul", { className: "tpl-buttons" }, buttons.map(function (b) {
      var li = el("li", null, [el("span", { className: "btn-type", text: String(b.type || "") }), " ",
        String(b.text === null || b.text === undefined ? "" : b.text)]);
      if (b.url) {
        li.appendChild(document.createTextNode(" "));
        li.appendChild(withPlaceholders(el("span", { className: "tpl-url" }), b.url));
      }
      if (b.parameter) li.appendChild(el("span", { className: "muted", text: " (takes a parameter)" }));
      return li;
    }));
  }

  // An RFC 3339 time as text that may break before its "T" (a narrow column), not at a hyphen.
  function stamp(v) {
    var s = v === null || v === undefined ? "" : String(v), i = s.indexOf("T");
    return el("span", null, i < 0 ? [el("span", { className: "nowrap", text: s })] :
      [el("span", { className: "nowrap", text: s.slice(0, i) }), el("wbr"), el("span", { className: "nowrap", text: s.slice(i) })]);
  }

  function templateRow(t) {
    var st = String(t.status || "");
    var params = t.parameters || [];
    return el("tr", null, [
      el("td", { "data-label": "Name" }, [el("div", null, [el("code", { text: t.name }),
        el("div", { className: "muted small", text: "WABA " + t.wabaId })])]),
      el("td", { "data-label": "Language", text: t.language }),
      el("td", { "data-label": "Status" }, [el("span", { className: "badge " + (TPL_BADGE[st] || "neutral"), text: st })]),
      el("td", { "data-label": "Category", text: t.category || "" }),
      el("td", { "data-label": "Body" }, [el("div", { className: "tpl-body-cell" }, [
        withPlaceholders(el("p", { className: "tpl-body" }), t.body),
        el("div", { className: "muted small", text: params.length ?
          (t.parameterFormat || "") + " parameters: " + params.join(", ") : "no parameter" })])]),
      el("td", { "data-label": "Buttons" }, [templateButtons(t.buttons)]),
      el("td", { "data-label": "Updated" }, [stamp(t.updatedAt)])
    ]);
  }

  function onTemplates(ev) {
    if (ev) ev.preventDefault();
    state.tplQuery = q({ limit: $("tpl-limit").value.trim(), name: $("tpl-name").value.trim(),
      status: $("tpl-status").value, language: $("tpl-language").value.trim() });
    loadTemplates(false);
  }

  // Loads a page of templates (the next one when `more`); `note` replaces the count in the status line.
  function loadTemplates(more, note) {
    var form = $("tpl-form");
    clearErrors(form);
    var query = state.tplQuery + (more && state.tplCursor ? "&cursor=" + encodeURIComponent(state.tplCursor) : "");
    api("GET", templatesPath() + "?" + query).then(function (res) {
      var body = $("tpl-table").tBodies[0];
      if (!more) body.textContent = "";
      if (res.status !== 200) {
        show($("tpl-more"), false);
        return showError(form, res);
      }
      res.body.data.items.forEach(function (t) { body.appendChild(templateRow(t)); });
      state.tplCursor = res.body.data.nextCursor;
      show($("tpl-more"), !!state.tplCursor);
      show($("tpl-empty"), body.rows.length === 0);
      status(note || (body.rows.length + " template" + (body.rows.length === 1 ? "" : "s") + " shown" +
        (state.tplCursor ? "; more on the next page." : ".")));
    });
  }

  // Reads every WABA of the tenant from Meta now (the old catalogue is kept when Meta fails), then
  // the list again with its filters.
  function onSyncTemplates() {
    var form = $("tpl-form"), button = $("tpl-sync");
    clearErrors(form);
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    status("Reading the templates from Meta...");
    api("POST", templatesPath() + "/sync").then(function (res) {
      button.disabled = false;
      button.removeAttribute("aria-busy");
      if (res.status !== 200) {
        status("");
        return showError(form, res);
      }
      var n = res.body.data.synced;
      loadTemplates(false, "Synced from Meta: " + n + " template" + (n === 1 ? "" : "s") + ".");
    });
  }

  // -- logs

  var COLUMNS = {
    omni: [["Reference", "reference"], ["To", "to"], ["Status", "status"], ["Channel", "winningChannel"],
      ["Mode", "deliveryMode"], ["Created", "createdAt"]],
    sms: [["Reference", "reference"], ["Source", "source"], ["To", "to"], ["Sender", "sender"],
      ["Status", "status"], ["Delivery", "deliveryStatus"], ["Created", "createdAt"]],
    otp: [["Reference", "reference"], ["To", "to"], ["Status", "status"], ["Failed tries", "failedAttempts"],
      ["Expires", "expiresAt"], ["Created", "createdAt"]],
    deliveries: [["Id", "id"], ["Type", "type"], ["Reference", "reference"], ["Status", "status"],
      ["Tries", function (d) { return String((d.tries || []).length); }], ["Created", "createdAt"]]
  };

  function setLogKind(kind) {
    state.logKind = kind;
    var form = $("logs-form");
    form.querySelectorAll("[data-kinds]").forEach(function (f) {
      show(f, f.getAttribute("data-kinds").split(" ").indexOf(kind) >= 0);
    });
    var sel = $("log-status");
    sel.textContent = "";
    sel.appendChild(el("option", { value: "", text: "any" }));
    STATUSES[kind].forEach(function (s) { sel.appendChild(el("option", { value: s, text: s })); });
    var head = $("log-table").tHead;
    head.textContent = "";
    head.appendChild(el("tr", null, COLUMNS[kind].map(function (c) {
      return el("th", { scope: "col", text: c[0] });
    }).concat([el("th", { scope: "col" }, [el("span", { className: "sr-only", text: "Actions" })])])));
    $("log-table").tBodies[0].textContent = "";
    showBatch(null);
    show($("log-more"), false);
    show($("log-empty"), false);
    clearErrors(form);
  }

  function logPath(kind) {
    return tenantPath({ omni: "omniLogs", sms: "smsLogs", otp: "otpLogs", deliveries: "deliveries" }[kind]);
  }

  function onLogs(ev) {
    if (ev) ev.preventDefault();
    var kind = state.logKind;
    var visible = function (id) { return !$(id).closest(".field").hidden; };
    var params = { limit: $("log-limit").value.trim(), status: $("log-status").value };
    [["to", "log-to"], ["channel", "log-channel"], ["source", "log-source"], ["reference", "log-reference"],
      ["batchId", "log-batch"], ["since", "log-since"], ["until", "log-until"]].forEach(function (p) {
      if (visible(p[1])) params[p[0]] = $(p[1]).value.trim();
    });
    state.logQuery = q(params);
    state.logBatch = params.batchId || "";
    loadLogs(false);
  }

  // -- a batch (API.md §20): its total, when it was made and completed, and its messages counted
  // by status, above its messages (the unified log filtered by batchId).

  var BATCH_COUNTS = ["queued", "scheduled", "sent", "delivered", "read", "failed", "undelivered", "expired", "canceled"];

  function showBatch(b) {
    var box = $("batch-summary");
    if (!b) return show(box, false);
    $("batch-h").textContent = "Batch " + b.batchId;
    var facts = $("batch-facts");
    facts.textContent = "";
    var waiting = b.counts.queued + b.counts.scheduled;
    facts.appendChild(dl([["Messages", String(b.total)], ["Created", b.createdAt],
      ["Completed", b.completedAt || "not yet: " + waiting + " waiting"]]));
    var list = $("batch-counts");
    list.textContent = "";
    BATCH_COUNTS.forEach(function (st) {
      var n = b.counts[st];
      if (!n) return;
      list.appendChild(el("li", { "data-status": st }, [omniBadge(st), el("span", { className: "n", text: String(n) })]));
    });
    show(box, true);
  }

  function loadBatch(id) {
    if (!id || state.logKind !== "omni") return showBatch(null);
    api("GET", tenantPath("batches") + "/" + encodeURIComponent(id)).then(function (res) {
      if (res.status === 200) return showBatch(res.body.data);
      showBatch(null);
      status(res.status === 404 ? "No batch " + id + " for this tenant." : messageOf(res));
    });
  }

  // Loads a page (the next one when `more`); `note` replaces the count in the status line.
  function loadLogs(more, note) {
    var form = $("logs-form");
    clearErrors(form);
    var kind = state.logKind;
    var query = state.logQuery + (more && state.logCursor ? "&cursor=" + encodeURIComponent(state.logCursor) : "");
    api("GET", logPath(kind) + "?" + query).then(function (res) {
      var body = $("log-table").tBodies[0];
      if (!more) body.textContent = "";
      if (res.status !== 200) return showError(form, res);
      res.body.data.items.forEach(function (item) { body.appendChild(logRow(kind, item)); });
      state.logCursor = res.body.data.nextCursor;
      show($("log-more"), !!state.logCursor);
      show($("log-empty"), body.rows.length === 0);
      status(note || (body.rows.length + " shown" + (state.logCursor ? "; more on the next page." : ".")));
      if (!more) loadBatch(state.logBatch);
    });
  }

  function logRow(kind, item) {
    var cells = COLUMNS[kind].map(function (c) {
      var v = typeof c[1] === "function" ? c[1](item) : item[c[1]];
      var td = el("td", { "data-label": c[0] });
      if (c[1] === "reference" || c[1] === "id") td.appendChild(el("code", { text: v === null || v === undefined ? "" : String(v) }));
      else if (c[1] === "to" && v) td.appendChild(numberButton(v));
      else if (kind === "omni" && c[1] === "status") td.appendChild(omniBadge(v));
      else if (c[1] === "createdAt" || c[1] === "expiresAt") td.appendChild(stamp(v));
      else td.textContent = v === null || v === undefined ? "" : String(v);
      return td;
    });
    var open = el("button", { type: "button", text: kind === "deliveries" ? "Tries" : "Timeline" });
    open.setAttribute("aria-label", (kind === "deliveries" ? "Tries of " : "Timeline of ") + (item.reference || item.id));
    open.addEventListener("click", function () { openTimeline(kind, item); });
    var actions = [open];
    if (kind === "deliveries") {
      var retry = el("button", { type: "button", text: "Retry" });
      retry.setAttribute("aria-label", "Retry delivery " + item.id);
      retry.addEventListener("click", function () { retryDelivery(item); });
      actions.push(retry);
    }
    cells.push(el("td", { className: "actions" }, actions));
    return el("tr", null, cells);
  }

  function retryDelivery(item) {
    api("POST", logPath("deliveries") + "/" + encodeURIComponent(item.id) + "/retry").then(function (res) {
      if (res.status !== 200) return showError($("logs-form"), res);
      loadLogs(false, "Delivery " + item.id + " queued for one more try.");
    });
  }

  // -- the timeline of one entry

  function dl(pairs) {
    var d = el("dl");
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === "") return;
      d.appendChild(el("dt", { text: p[0] }));
      d.appendChild(typeof p[1] === "object" ? el("dd", null, [p[1]]) : el("dd", { text: String(p[1]) }));
    });
    return d;
  }

  function omniBadge(st) {
    st = st === null || st === undefined ? "" : String(st);
    return el("span", { className: "badge " + (OMNI_BADGE[st] || "neutral"), text: st });
  }

  function errorText(e) {
    if (!e) return null;
    var parts = [e.code];
    if (e.message) parts.push(e.message);
    if (e.providerCode !== undefined && e.providerCode !== null) parts.push("provider code " + e.providerCode);
    if (e.httpStatus) parts.push("HTTP " + e.httpStatus);
    return parts.join(" · ");
  }

  function history(list, label, fmt) {
    if (!list || !list.length) return null;
    return el("div", null, [el("h4", { text: label }),
      el("ol", { className: "history" }, list.map(function (h) { return el("li", { text: fmt(h) }); }))]);
  }

  function attemptStep(a, i) {
    return el("li", { className: "step " + (a.status === "failed" ? "bad" : a.status === "sent" ? "good" : "") }, [
      el("h3", { text: (i + 1) + ". " + a.channel + ": " + a.status }),
      dl([["Attempted at", a.attemptedAt], ["Latency", a.latencyMs === undefined ? null : a.latencyMs + " ms"],
        ["Throttled", a.throttles > 0 ? a.throttles + "× (429) before this outcome" : null],
        ["Provider message id", a.providerMessageId], ["Error", errorText(a.error)],
        ["Why this channel", a.fallbackReason], ["Delivery status", a.deliveryStatus],
        ["Delivered at", a.deliveredAt], ["Read at", a.readAt], ["Delivery error", errorText(a.deliveryError) || a.deliveryError]]),
      history(a.statusHistory, "Delivery statuses", function (h) {
        return h.at + "  " + h.status + (h.providerCode ? " (provider code " + h.providerCode + ")" : "");
      })
    ]);
  }

  // -- a queued message's life (API.md §19): accepted, due, each attempt, then how it ended (or
  // what it waits for). Sync sends have no dueAt and show none of it.

  var ENDED = { sent: 1, delivered: 1, read: 1, undelivered: 1, failed: 1, unknown: 1, canceled: 1, expired: 1 };

  // One step: a dot (filled when it happened, in the colour of its outcome; hollow when it is still
  // ahead), what, when, a note.
  function lifeStep(name, tone, what, badge, at, note) {
    return el("li", { className: "life-step " + tone, "data-step": name }, [
      el("div", { className: "life-head" }, [el("span", { className: "life-what", text: what }),
        badge ? omniBadge(badge) : null, at ? el("span", { className: "life-at" }, [stamp(at)]) : null]),
      note ? el("p", { className: "life-note", text: note }) : null
    ]);
  }

  function queuedLife(item) {
    var st = String(item.status || ""), ended = !!ENDED[st] && !!item.completedAt;
    var dueReached = st !== "scheduled" && !(ended && Date.parse(item.dueAt) > Date.parse(item.completedAt));
    var steps = [lifeStep("accepted", "done", "Accepted", null, item.createdAt, null)];
    steps.push(lifeStep("due", dueReached ? "done" : "ahead", dueReached ? "Due" : "Due (not reached)", null,
      item.dueAt, Date.parse(item.dueAt) - Date.parse(item.createdAt) < 1000 ? "at once" : null));
    (item.attempts || []).forEach(function (a, i) {
      var step = lifeStep("attempt", { sent: "good", failed: "bad", unknown: "warn" }[a.status] || "done",
        "Attempt " + (i + 1) + " · " + a.channel, a.status, a.attemptedAt,
        a.throttles > 0 ? "throttled " + a.throttles + "× (429) before this outcome" : null);
      if (a.throttles > 0) step.classList.add("throttled");
      steps.push(step);
    });
    if (st === "canceled") {
      steps.push(lifeStep("end", "done", "Canceled", null, item.completedAt, "no provider was called for it"));
    } else if (st === "expired") {
      steps.push(lifeStep("end", "bad", "Expired", null, item.completedAt,
        "no channel could take it while it was valid"));
    } else if (ended) {
      steps.push(lifeStep("end", OMNI_BADGE[st], "Completed", st, item.completedAt,
        item.winningChannel ? "on " + item.winningChannel : "no channel accepted it"));
    } else {
      var waits = { scheduled: "Waiting until it is due", queued: "Waiting for its turn at its sender's rate",
        pending: "An attempt is in flight" };
      steps.push(lifeStep("waiting", "ahead", waits[st] || "Not completed yet", null, null, null));
      steps.push(lifeStep("valid-until", "ahead", "Valid until", null, item.validUntil,
        "expires then if no channel has accepted it"));
    }
    return el("section", { className: "life", "aria-labelledby": "life-h" }, [
      el("h3", { id: "life-h", text: "Queued life" }), el("ol", { className: "life-steps" }, steps)]);
  }

  function openTimeline(kind, item) {
    var body = $("timeline-body");
    body.textContent = "";
    var title = kind === "deliveries" ? "Delivery " + item.id : item.reference + " to " + item.to;
    $("timeline-h").textContent = title;
    if (kind === "omni") {
      body.appendChild(dl([["Status", omniBadge(item.status)], ["Mode", item.deliveryMode],
        ["Winning channel", item.winningChannel], ["Priority", item.priority], ["Due at", item.dueAt],
        ["Valid until", item.validUntil], ["Created", item.createdAt], ["Completed", item.completedAt], ["Text", item.text]]));
      if (item.dueAt) body.appendChild(queuedLife(item));
      body.appendChild(el("ol", { className: "timeline" }, (item.attempts || []).map(attemptStep)));
      if (!(item.attempts || []).length) {
        body.appendChild(el("p", { text: ENDED[item.status] ? "No attempt: no provider was called." : "No attempt yet." }));
      }
      if ((item.skipped || []).length) {
        body.appendChild(el("h4", { text: "Skipped" }));
        body.appendChild(el("ul", null, item.skipped.map(function (s) {
          return el("li", { text: s.channel + ": " + s.reason });
        })));
      }
    } else if (kind === "sms") {
      body.appendChild(dl([["Source", item.source], ["Status", item.status], ["Sender", item.sender],
        ["Segments", item.segments], ["Encoding", item.encoding], ["Provider message id", item.providerMessageId],
        ["Error", errorText(item.error)], ["Delivery status", item.deliveryStatus], ["Delivered at", item.deliveredAt],
        ["Created", item.createdAt], ["Text", item.text]]));
    } else if (kind === "otp") {
      body.appendChild(dl([["Status", item.status], ["Length", item.length], ["Expires", item.expiresAt],
        ["Verified", item.verifiedAt], ["Failed tries", item.failedAttempts], ["Created", item.createdAt]]));
      body.appendChild(history(item.history, "History", function (h) { return h.at + "  " + h.event; }) ||
        el("p", { text: "No event yet." }));
    } else {
      body.appendChild(dl([["Type", item.type], ["Reference", item.reference], ["Status", item.status],
        ["Created", item.createdAt], ["Delivered", item.deliveredAt], ["Next try", item.nextTryAt],
        ["Last error", item.lastError]]));
      body.appendChild(el("ol", { className: "timeline" }, (item.tries || []).map(function (t, i) {
        return el("li", { className: "step " + (t.httpStatus >= 200 && t.httpStatus < 300 ? "good" : "bad") }, [
          el("h3", { text: (i + 1) + ". " + (t.httpStatus ? "HTTP " + t.httpStatus : "no answer") }),
          dl([["At", t.at], ["Latency", t.latencyMs === null || t.latencyMs === undefined ? null : t.latencyMs + " ms"],
            ["Error", errorText(t.error)]])
        ]);
      })));
    }
    var d = $("timeline");
    d.showModal();
    $("timeline-close").focus();
  }

  // ---- inbound messages, suppressions, a recipient (API.md §21) ----------------------------------
  // What providers sent (a message's text, its type) is inserted as text only, like everything else.

  // A channel as a badge: both WhatsApp channels one colour, SMS another; the word says which.
  function channelBadge(ch) {
    ch = ch === null || ch === undefined ? "" : String(ch);
    var family = ch === "sms" ? "sms" : ch.indexOf("whatsapp") === 0 ? "whatsapp" : "other";
    return el("span", { className: "badge ch-" + family, text: ch });
  }

  // A number as a button that opens its recipient page.
  function numberButton(number) {
    number = String(number);
    var b = el("button", { type: "button", className: "link", text: number });
    b.setAttribute("aria-label", "Open recipient " + number);
    b.addEventListener("click", function () { openRecipient(number); });
    return b;
  }

  function orNone(v, none) {
    return v === null || v === undefined || v === "" ? el("span", { className: "muted", text: none }) : String(v);
  }

  // One inbound message; `withFrom` false on a recipient's page, where every message is theirs.
  function inboundRow(m, withFrom) {
    var via = m.phoneNumberId ? "phone number id " + m.phoneNumberId : m.session ? "session " + m.session : null;
    return el("tr", { "data-id": String(m.id) }, [
      el("td", { "data-label": "Received" }, [stamp(m.receivedAt)]),
      el("td", { "data-label": "Channel" }, [channelBadge(m.channel)]),
      withFrom ? el("td", { "data-label": "From" }, [numberButton(m.from)]) : null,
      el("td", { "data-label": "To" }, [el("div", null, [String(m.to),
        via ? el("div", { className: "muted small", text: via }) : null])]),
      el("td", { "data-label": "Type", text: String(m.type || "") }),
      el("td", { "data-label": "Text" }, [m.text === null || m.text === undefined ?
        el("span", { className: "muted", text: "(no text)" }) : el("p", { className: "in-text", text: String(m.text) })])
    ]);
  }

  function suppressionRow(x, withNumber) {
    return el("tr", null, [
      withNumber ? el("td", { "data-label": "Number" }, [numberButton(x.to)]) : null,
      el("td", { "data-label": "Kind" }, [el("span", { className: "badge bad", text: String(x.channel) })]),
      el("td", { "data-label": "Source", text: String(x.source) }),
      el("td", { "data-label": "Reason" }, [orNone(x.reason, "none given")]),
      el("td", { "data-label": "Since" }, [stamp(x.createdAt)])
    ]);
  }

  // A list read a page at a time like the logs ("Next page" appends the next one). Each read
  // bumps `seq`, so an answer to an older read (filters changed meanwhile) is dropped.
  function pager(o) {
    o.query = "";
    o.cursor = null;
    o.seq = 0;
    return o;
  }

  var pagers = {
    inbound: pager({ form: "in-form", table: "in-table", empty: "in-empty", more: "in-more",
      noun: ["inbound message", "inbound messages"], route: "inbound",
      row: function (m) { return inboundRow(m, true); } }),
    suppressions: pager({ form: "sup-form", table: "sup-table", empty: "sup-empty", more: "sup-more",
      noun: ["suppression", "suppressions"], route: "suppressions",
      row: function (x) { return suppressionRow(x, true); } }),
    recipientInbound: pager({ form: null, table: "rcp-in-table", empty: "rcp-in-none", more: "rcp-in-more",
      noun: null, route: "inbound", row: function (m) { return inboundRow(m, false); } })
  };

  function loadPage(p, more) {
    var form = p.form ? $(p.form) : null;
    if (form) clearErrors(form);
    var seq = ++p.seq;
    var query = p.query + (more && p.cursor ? "&cursor=" + encodeURIComponent(p.cursor) : "");
    api("GET", tenantPath(p.route) + "?" + query).then(function (res) {
      if (seq !== p.seq) return;
      var body = $(p.table).tBodies[0];
      if (!more) body.textContent = "";
      if (res.status !== 200) {
        show($(p.more), false);
        return form ? showError(form, res) : status(messageOf(res));
      }
      res.body.data.items.forEach(function (it) { body.appendChild(p.row(it)); });
      p.cursor = res.body.data.nextCursor;
      show($(p.more), !!p.cursor);
      show($(p.empty), body.rows.length === 0);
      var n = body.rows.length;
      if (p.noun) status(n + " " + p.noun[n === 1 ? 0 : 1] + " shown" + (p.cursor ? "; more on the next page." : "."));
    });
  }

  function onInbound(ev) {
    if (ev) ev.preventDefault();
    pagers.inbound.query = q({ limit: $("in-limit").value.trim(), from: $("in-from").value.trim(),
      channel: $("in-channel").value, since: $("in-since").value.trim(), until: $("in-until").value.trim() });
    loadPage(pagers.inbound, false);
  }

  function onSuppressions(ev) {
    if (ev) ev.preventDefault();
    pagers.suppressions.query = q({ limit: $("sup-limit").value.trim(), to: $("sup-to").value.trim(),
      channel: $("sup-kind").value });
    loadPage(pagers.suppressions, false);
  }

  // -- a recipient: its suppressions, its WhatsApp windows, when it last wrote, its messages

  // A number as typed ("+62 812-3456 7890") the way the API takes it.
  function typedNumber(s) { return String(s || "").replace(/[\s().-]/g, ""); }

  function openRecipient(number) {
    $("rcp-to").value = number;
    selectTab("recipient", true);
  }

  // A session shown for another tenant (or another sign-in) is not shown again.
  function forgetQr() {
    stopQr();
    state.qr.name = "";
    $("qr-name").value = "default";
    show($("qr"), false);
    clearQrCode();
    clearErrors($("qr-form"));
  }

  function forgetRecipient() {
    state.rcpSeq++;
    Object.keys(pagers).forEach(function (k) { pagers[k].seq++; });
    $("rcp-to").value = "";
    show($("rcp"), false);
    show($("rcp-hint"), true);
    clearErrors($("rcp-form"));
  }

  function onRecipient(ev) {
    ev.preventDefault();
    loadRecipient($("rcp-to").value, true);
  }

  function loadRecipient(typed, focus) {
    var form = $("rcp-form"), to = typedNumber(typed);
    clearErrors(form);
    $("rcp-to").value = to;
    var seq = ++state.rcpSeq;
    pagers.recipientInbound.seq++;
    if (to === "") {
      show($("rcp"), false);
      show($("rcp-hint"), true);
      return;
    }
    api("GET", tenantPath("recipients") + "/" + encodeURIComponent(to)).then(function (res) {
      if (seq !== state.rcpSeq) return;
      if (res.status !== 200) {
        show($("rcp"), false);
        show($("rcp-hint"), true);
        return showError(form, res);
      }
      showRecipient(res.body.data);
      pagers.recipientInbound.query = q({ from: res.body.data.to, limit: 20 });
      loadPage(pagers.recipientInbound, false);
      if (focus) $("rcp-h").focus();
    });
  }

  // The tenant's number a Meta phone number id belongs to (its settings), or null.
  function metaNumberOf(phoneNumberId) {
    var nums = channel((state.tenant && state.tenant.settings) || {}, "whatsapp_meta").numbers || {};
    var found = null;
    Object.keys(nums).forEach(function (n) { if (nums[n] && nums[n].phoneNumberId === phoneNumberId) found = n; });
    return found;
  }

  function showRecipient(r) {
    var windows = r.whatsappWindows || [], sups = r.suppressions || [], kinds = r.suppressed || [];
    $("rcp-h").textContent = "Recipient " + r.to;
    var latest = null;
    windows.forEach(function (w) { if (!latest || Date.parse(w.openUntil) > Date.parse(latest)) latest = w.openUntil; });
    var facts = $("rcp-facts");
    facts.textContent = "";
    facts.appendChild(dl([
      ["Suppressed", kinds.length ? el("span", { className: "kinds" }, kinds.map(function (k) {
        return el("span", { className: "badge bad", text: String(k) });
      })) : el("span", { className: "badge good", text: "none" })],
      ["WhatsApp window", latest ? el("span", null, [el("span", { className: "badge good", text: "open" }), " until ",
        stamp(latest)]) : el("span", { className: "badge neutral", text: "closed" })],
      ["Not on WhatsApp until", r.notOnWhatsappUntil ? stamp(r.notOnWhatsappUntil) :
        el("span", { className: "muted", text: "not marked" })],
      ["Last inbound at", r.lastInboundAt ? stamp(r.lastInboundAt) : el("span", { className: "muted", text: "never" })]
    ]));
    var sb = $("rcp-sup-table").tBodies[0];
    sb.textContent = "";
    sups.forEach(function (x) { sb.appendChild(suppressionRow(x, false)); });
    show($("rcp-sup-table"), sups.length > 0);
    show($("rcp-sup-none"), sups.length === 0);
    var wb = $("rcp-win-table").tBodies[0];
    wb.textContent = "";
    windows.forEach(function (w) {
      var number = metaNumberOf(w.phoneNumberId);
      wb.appendChild(el("tr", null, [
        el("td", { "data-label": "Phone number id" }, [el("div", null, [el("code", { text: String(w.phoneNumberId) }),
          number ? el("div", { className: "muted small", text: "+" + number }) : null])]),
        el("td", { "data-label": "Open until" }, [stamp(w.openUntil)])
      ]));
    });
    show($("rcp-win-table"), windows.length > 0);
    show($("rcp-win-none"), windows.length === 0);
    $("rcp-in-table").tBodies[0].textContent = "";
    show($("rcp-in-none"), false);
    show($("rcp-in-more"), false);
    show($("rcp-hint"), false);
    show($("rcp"), true);
  }

  // ---- a WhatsApp QR session (API.md §23) --------------------------------------------------------
  // The session the name typed names (a tenant's settings are not shown to it, so the page does not
  // list them: "default" to start with). While it starts or waits for a scan, the session and its
  // QR code are read again every QR_EVERY_MS, until it is WORKING (or stopped, failed, or the tab
  // left), and after an action until it settles (QR_SETTLE_READS). The PNG is fetched with the
  // token in its header like every other request and drawn on a canvas (createImageBitmap), so no
  // image URL is made and the CSP's img-src stays 'self'.

  var QR_EVERY_MS = 3000;
  // After a start, stop or logout, the session is read this many more times whatever it says:
  // WAHA's events of the move reach the gateway after its answer, so a read right after a logout
  // can say STOPPED (the event before the STARTING answered) until STARTING and SCAN_QR_CODE come.
  var QR_SETTLE_READS = 2;
  var QR_BADGE = { WORKING: "good", STARTING: "info", SCAN_QR_CODE: "warn", STOPPED: "neutral", FAILED: "bad" };
  var QR_WAITING = { STARTING: 1, SCAN_QR_CODE: 1 };

  function sessionName(typed) { return String(typed || "").trim(); }

  function stopQr() {
    state.qr.seq++;
    if (state.qr.timer) window.clearTimeout(state.qr.timer);
    state.qr.timer = 0;
  }

  function onQr(ev) {
    ev.preventDefault();
    loadQr($("qr-name").value, true);
  }

  // Reads session `typed` (and its QR code while it waits for a scan) and shows it.
  function loadQr(typed, focus) {
    var form = $("qr-form"), name = sessionName(typed);
    stopQr();
    clearErrors(form);
    if (name === "") {
      show($("qr"), false);
      return showError(form, { status: 0, body: { message: "Type the session's name.", error: { field: "name" } } });
    }
    if (name !== state.qr.name) {
      show($("qr"), false);
      clearQrCode();
    }
    state.qr.name = name;
    readQr(name, ++state.qr.seq, focus);
  }

  function qrPath(name) { return tenantPath("sessions") + "/" + encodeURIComponent(name); }

  function readQr(name, seq, focus, settle) {
    api("GET", qrPath(name)).then(function (res) {
      if (seq !== state.qr.seq) return;
      if (res.status === 404) {
        showSession(name, null);
      } else if (res.status !== 200) {
        show($("qr"), false);
        return showError($("qr-form"), res);
      } else {
        showSession(name, res.body.data);
      }
      if (focus) $("qr-h").focus();
      var st = res.status === 200 ? res.body.data.status : null;
      if (st === "SCAN_QR_CODE") drawQr(name, seq);
      else clearQrCode();
      if (QR_WAITING[st] || settle > 0) {
        state.qr.timer = window.setTimeout(function () {
          state.qr.timer = 0;
          if (seq === state.qr.seq) readQr(name, seq, false, QR_WAITING[st] ? 0 : settle - 1);
        }, QR_EVERY_MS);
      }
    });
  }

  // `s` is the session as the API answered it, or null when the gateway knows nothing of it.
  function showSession(name, s) {
    $("qr-h").textContent = "Session " + name;
    var facts = $("qr-facts");
    facts.textContent = "";
    if (!s) {
      facts.appendChild(el("p", { className: "muted", text: "The gateway knows nothing of this session yet: " +
        "it was never started here. Start it to link a phone (only a session one of the tenant's whatsapp_qr " +
        "numbers uses can be started)." }));
    } else {
      facts.appendChild(dl([["Status", el("span", { className: "badge " + (QR_BADGE[s.status] || "neutral"),
        "data-status": String(s.status), text: String(s.status) })],
        ["Number", s.number ? String(s.number) : el("span", { className: "muted", text: "none linked" })],
        ["Updated", stamp(s.updatedAt)]]));
    }
    var st = s ? s.status : null;
    show($("qr-start"), !QR_WAITING[st] && st !== "WORKING");
    show($("qr-stop"), !!QR_WAITING[st] || st === "WORKING");
    show($("qr-logout"), !!s && st !== "STOPPED");
    var linked = $("qr-linked");
    linked.textContent = "";
    if (st === "WORKING") {
      linked.appendChild(el("span", { className: "badge good", text: "linked" }));
      linked.appendChild(document.createTextNode(" WhatsApp " + (s.number || "(number not known yet)") +
        " is linked to session " + name + ": its messages go out on it."));
    } else if (st === "STARTING") {
      linked.textContent = "Starting: the QR code follows in a moment.";
    } else if (st === "FAILED") {
      linked.textContent = "The session failed on the WhatsApp server: start it again.";
    }
    show(linked, linked.textContent !== "");
    show($("qr"), true);
  }

  function clearQrCode() {
    var c = $("qr-canvas");
    c.width = 0;
    c.height = 0;
    c.removeAttribute("data-drawn");
    show($("qr-code"), false);
  }

  // Fetches the session's QR code and draws it; a 409 (it stopped waiting for a scan meanwhile)
  // is left to the next read of the session.
  function drawQr(name, seq) {
    apiBlob(qrPath(name) + "/qr").then(function (res) {
      if (seq !== state.qr.seq) return null;
      if (res.status !== 200) {
        if (res.status !== 409) status(messageOf(res));
        return null;
      }
      return window.createImageBitmap(res.blob).then(function (img) {
        if (seq !== state.qr.seq) return;
        var c = $("qr-canvas");
        c.width = img.width;
        c.height = img.height;
        c.getContext("2d").drawImage(img, 0, 0);
        if (img.close) img.close();
        c.setAttribute("data-drawn", String(Date.now()));
        show($("qr-code"), true);
      });
    }).catch(function () {
      if (seq === state.qr.seq) status("The QR code could not be read as an image.");
    });
  }

  // Start, stop, log out: the answer is the session; then it is read (and followed) again.
  function qrAction(action) {
    var name = state.qr.name;
    if (action === "logout" && !window.confirm("Log session " + name + " out? The phone is unlinked; " +
        "a new scan links it again.")) return;
    var button = $("qr-" + action);
    button.disabled = true;
    stopQr();
    var seq = state.qr.seq;
    clearErrors($("qr-form"));
    api("POST", qrPath(name) + "/" + action).then(function (res) {
      button.disabled = false;
      if (seq !== state.qr.seq) return;
      if (res.status !== 200) return showError($("qr-form"), res);
      status({ start: "Session " + name + " started.", stop: "Session " + name + " stopped.",
        logout: "Session " + name + " logged out." }[action]);
      showSession(name, res.body.data);
      readQr(name, seq, false, QR_SETTLE_READS);
    });
  }

  // ---- usage (API.md §22): four pictures and a table of the last 30 UTC days ---------------------
  // For every tenant (the Usage view, GET /admin/usage) or one (its Usage tab, the admin mirror of
  // its GET /api/usage). The charts are inline SVG drawn here with createElementNS: colours and
  // text sizes come from app.css by class (no style attribute: the CSP). A chart's viewBox is the
  // width it is drawn at, in CSS pixels, so its text keeps its size from 375 px to a desktop; it
  // scales with the page (width 100%) and is drawn again when the window's width changes.
  // Amounts stay the API's decimal strings: sums shown as money are added in micro-units
  // (integers); floats only place the bars.

  var SVG_NS = "http://www.w3.org/2000/svg";
  var USAGE_DAYS = 30;
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  // One per place the charts are shown; `seq` drops an answer to an older read, `data` is what
  // the last one drew (drawn again at a new width).
  var usageViews = {
    all: { box: "usage-all", seq: 0, data: null, width: 0 },
    tenant: { box: "usage-tenant", seq: 0, data: null, width: 0 }
  };

  function svg(tag, attrs, children) {
    var e = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else e.setAttribute(k === "className" ? "class" : k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }

  // The `n` UTC days ending today, oldest first, as YYYY-MM-DD.
  function lastDays(n) {
    var now = new Date(), today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()), out = [];
    for (var i = n - 1; i >= 0; i--) out.push(new Date(today - i * 86400000).toISOString().slice(0, 10));
    return out;
  }

  // "2026-11-07" as "7 Nov".
  function dayLabel(day) { return Number(day.slice(8, 10)) + " " + MONTHS[Number(day.slice(5, 7)) - 1]; }

  // -- money as the API writes it ("0.4380", "-0.0120"): exact sums in micro-units

  function micros(amount) {
    var s = String(amount), neg = s.charAt(0) === "-";
    var p = (neg ? s.slice(1) : s).split(".");
    var m = Number(p[0]) * 1000000 + Number(((p[1] || "") + "000000").slice(0, 6));
    return neg ? -m : m;
  }

  function decimalsOf(amount) {
    var s = String(amount), i = s.indexOf(".");
    return i < 0 ? 0 : Math.min(6, s.length - i - 1);
  }

  // The sum of amounts with as many decimals as the most precise of them (at least 2).
  function sumAmounts(list) {
    var total = 0, places = 2;
    list.forEach(function (a) { total += micros(a); places = Math.max(places, decimalsOf(a)); });
    var neg = total < 0, m = Math.abs(total), frac = String(m % 1000000);
    while (frac.length < 6) frac = "0" + frac;
    return (neg ? "-" : "") + Math.floor(m / 1000000) + "." + frac.slice(0, places);
  }

  // 2 of 3 as "66.7%" (one decimal, none when whole).
  function percent(part, whole) { return Math.round(part * 1000 / whole) / 10 + "%"; }

  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }

  // Axis ticks from 0 past `max`: about `count` steps of 1, 2 or 5 times a power of ten (whole
  // steps when `whole`), and the decimals their labels need.
  function ticks(max, count, whole) {
    var raw = max / count, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    var step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
    if (whole) step = Math.max(1, Math.round(step));
    var n = Math.max(1, Math.ceil(max / step - 1e-9)), values = [];
    for (var i = 0; i <= n; i++) values.push(i * step);
    return { values: values, top: n * step, places: step >= 1 ? 0 : Math.ceil(-Math.log10(step) - 1e-9) };
  }

  // An <svg> of `w` by `h` CSS pixels, its name and description from <title> and <desc>.
  function chartSvg(id, w, h, title, desc, cls) {
    return svg("svg", { viewBox: "0 0 " + w + " " + h, width: "100%", role: "img",
      className: "chart-svg" + (cls ? " " + cls : ""), "aria-labelledby": id + "-title " + id + "-desc" },
      [svg("title", { id: id + "-title", text: title }), svg("desc", { id: id + "-desc", text: desc })]);
  }

  // A bar per day, each split into `o.series` ([{key, cls, values: {day: number}, text: {day: label}}])
  // stacked from the bottom; a day without any draws nothing. `o.dayTitle(day)` and
  // `o.segTitle(series, day)` name a bar and a segment (their tooltips).
  function dayBars(o) {
    var W = Math.max(260, Math.round(o.width)), H = W < 560 ? 190 : 230;
    var totals = o.days.map(function (d) {
      return o.series.reduce(function (s, x) { return s + (x.values[d] || 0); }, 0);
    });
    var t = ticks(Math.max.apply(null, totals), 4, o.whole);
    var labels = t.values.map(function (v) { return v.toFixed(t.places); });
    var left = 12 + 7 * Math.max.apply(null, labels.map(function (l) { return l.length; }));
    // Room on the right for today's label under the last bar (about 40 px wide).
    var right = Math.max(6, Math.ceil(22 - (W - left) / o.days.length / 2)), top = 8, bottom = 24;
    var pw = W - left - right, ph = H - top - bottom;
    var slot = pw / o.days.length, bw = Math.max(2, slot * 0.72);
    var y = function (v) { return top + ph - v / t.top * ph; };
    var root = chartSvg(o.id, W, H, o.title, o.desc);
    var axis = svg("g", { className: "axis" });
    t.values.forEach(function (v, i) {
      axis.appendChild(svg("line", { x1: left, x2: W - right, y1: y(v).toFixed(1), y2: y(v).toFixed(1),
        className: i === 0 ? "base" : "grid" }));
      axis.appendChild(svg("text", { x: left - 6, y: (y(v) + 4).toFixed(1), "text-anchor": "end", text: labels[i] }));
    });
    // A label every so many days, counted back from today's, at least 48 px apart.
    var every = [1, 2, 3, 5, 7, 10, 15].filter(function (k) { return k * slot >= 48; })[0] || o.days.length;
    o.days.forEach(function (d, i) {
      if ((o.days.length - 1 - i) % every) return;
      var x = left + (i + 0.5) * slot, anchor = "middle";
      if (x + 22 > W) {
        x = W - 1;
        anchor = "end";
      }
      axis.appendChild(svg("text", { x: x.toFixed(1), y: H - 6, "text-anchor": anchor, text: dayLabel(d) }));
    });
    root.appendChild(axis);
    var bars = svg("g", { className: "bars" });
    o.days.forEach(function (d, i) {
      if (!totals[i]) return;
      var g = svg("g", { className: "day", "data-day": d }, [svg("title", { text: o.dayTitle(d) })]);
      var x = (left + i * slot + (slot - bw) / 2).toFixed(2), base = 0;
      o.series.forEach(function (s) {
        var v = s.values[d] || 0;
        if (!v) return;
        g.appendChild(svg("rect", { x: x, y: y(base + v).toFixed(2), width: bw.toFixed(2),
          height: (y(base) - y(base + v)).toFixed(2), className: "seg " + s.cls, "data-series": s.key,
          "data-value": s.text ? s.text[d] : String(v) }, [svg("title", { text: o.segTitle(s, d) })]));
        base += v;
      });
      bars.appendChild(g);
    });
    root.appendChild(bars);
    return root;
  }

  // Delivered of accepted per channel (`rows`: [{channel, accepted, delivered}]) as horizontal bars.
  function deliveryBars(o) {
    var W = Math.max(260, Math.round(o.width)), rowH = 46, H = o.rows.length * rowH;
    var root = chartSvg(o.id, W, H, o.title, o.desc);
    o.rows.forEach(function (r, i) {
      var y0 = i * rowH, g = svg("g", { className: "rate", "data-channel": r.channel });
      var what = r.accepted ? percent(r.delivered, r.accepted) + " · " + r.delivered + " of " + r.accepted + " delivered" :
        "nothing accepted";
      g.appendChild(svg("title", { text: r.channel + ": " + what }));
      g.appendChild(svg("text", { x: 0, y: y0 + 15, className: "name", text: r.channel }));
      g.appendChild(svg("text", { x: W, y: y0 + 15, "text-anchor": "end", className: "value", text: what }));
      g.appendChild(svg("rect", { x: 0, y: y0 + 22, width: W, height: 14, rx: 3, className: "track" }));
      if (r.delivered) {
        g.appendChild(svg("rect", { x: 0, y: y0 + 22, width: (W * r.delivered / r.accepted).toFixed(2), height: 14, rx: 3,
          className: "seg s-" + r.channel }));
      }
      root.appendChild(g);
    });
    return root;
  }

  // An annular sector of the ring centred at (c, c), radii R and r, from angle a0 to a1 (radians,
  // clockwise from 3 o'clock); a whole ring as two halves.
  function sector(c, R, r, a0, a1) {
    if (a1 - a0 > 2 * Math.PI - 1e-6) return sector(c, R, r, a0, a0 + Math.PI) + " " + sector(c, R, r, a0 + Math.PI, a1);
    var large = a1 - a0 > Math.PI ? 1 : 0;
    var p = function (rad, a) { return (c + rad * Math.cos(a)).toFixed(2) + " " + (c + rad * Math.sin(a)).toFixed(2); };
    return "M" + p(R, a0) + " A" + R + " " + R + " 0 " + large + " 1 " + p(R, a1) + " L" + p(r, a1) +
      " A" + r + " " + r + " 0 " + large + " 0 " + p(r, a0) + " Z";
  }

  // The fallback messages as a ring, a sector per winning channel, their number in the middle.
  function fallbackRing(o) {
    var root = chartSvg(o.id, 160, 160, o.title, o.desc, "ring");
    var a = -Math.PI / 2;
    o.parts.forEach(function (p) {
      if (!p.n) return;
      var a1 = a + 2 * Math.PI * p.n / o.total;
      root.appendChild(svg("path", { d: sector(80, 76, 48, a, a1), className: "seg s-" + p.channel,
        "data-channel": p.channel }, [svg("title", { text: p.channel + ": " + p.n + " of " + o.total + " (" +
        percent(p.n, o.total) + ")" })]));
      a = a1;
    });
    root.appendChild(svg("text", { x: 80, y: 82, "text-anchor": "middle", className: "big", text: String(o.total) }));
    root.appendChild(svg("text", { x: 80, y: 102, "text-anchor": "middle", text: "fallback" }));
    return root;
  }

  function legend(items) {
    return el("ul", { className: "legend" }, items.map(function (it) {
      return el("li", { "data-channel": it.channel }, [
        el("span", { className: "sw s-" + it.channel, "aria-hidden": "true" }), el("span", { text: it.text })]);
    }));
  }

  // A chart's box: its heading, where its picture goes, and what follows it.
  function chartFigure(id, kind, title, after) {
    return el("figure", { className: "chart", id: id, "data-chart": kind }, [
      el("figcaption", null, [el("h3", { text: title })]), el("div", { className: "plot" })].concat(after || []));
  }

  // Reads the three groupings of the last 30 days from `path` and draws them into view `v`.
  function loadUsage(v, path) {
    var box = $(v.box), seq = ++v.seq, days = lastDays(USAGE_DAYS);
    var range = { since: days[0] + "T00:00:00Z", until: days[days.length - 1] + "T00:00:00Z" };
    v.data = null;
    box.textContent = "";
    box.setAttribute("data-state", "loading");
    box.appendChild(el("p", { className: "muted", text: "Reading the usage..." }));
    var read = function (by) {
      return api("GET", path + "?" + q({ since: range.since, until: range.until, groupBy: by }));
    };
    Promise.all([read("day"), read("channel"), read("day,channel")]).then(function (res) {
      if (seq !== v.seq) return;
      box.textContent = "";
      var bad = res.filter(function (r) { return r.status !== 200; })[0];
      if (bad) {
        box.setAttribute("data-state", "error");
        box.appendChild(el("p", { className: "error", role: "alert", text: messageOf(bad) }));
        return;
      }
      v.data = { days: days, byDay: res[0].body.data, byChannel: res[1].body.data, byDayChannel: res[2].body.data };
      drawUsage(v);
    });
  }

  function drawUsage(v) {
    var box = $(v.box), d = v.data, id = v.box, days = d.days, last = days[days.length - 1];
    var currency = d.byDay.currency, dayRows = d.byDay.rows, chRows = d.byChannel.rows, fb = d.byChannel.fallback;
    var total = dayRows.reduce(function (s, r) { return s + r.messages; }, 0);
    var cost = currency ? sumAmounts(dayRows.filter(function (r) { return r.cost; }).map(function (r) {
      return r.cost.amount;
    })) : null;
    box.textContent = "";
    box.appendChild(el("p", { className: "usage-summary" }, [el("strong", { text: plural(total, "message", "messages") }),
      " from " + dayLabel(days[0]) + " to " + dayLabel(last) + " " + last.slice(0, 4) + " (UTC)",
      currency ? el("span", null, [", costing ", el("strong", { text: cost + " " + currency })]) :
        ", not priced (no rate card)",
      "."]));
    if (!dayRows.length) {
      box.appendChild(el("p", { className: "empty usage-empty", text: "No messages in the last 30 days." }));
      box.setAttribute("data-state", "ready");
      return;
    }
    var used = CHANNELS.filter(function (ch) { return chRows.some(function (r) { return r.channel === ch; }); });
    var charts = el("div", { className: "charts" });

    // 1. Messages per day by channel.
    charts.appendChild(chartFigure(id + "-daily", "daily", "Messages per day by channel", [
      legend(used.map(function (ch) { return { channel: ch, text: ch }; })),
      el("p", { className: "muted small note", text: "A message tried on more than one channel counts on each." })]));

    // 2. Delivery rate by channel.
    var accepted = chRows.some(function (r) { return r.accepted > 0; });
    charts.appendChild(chartFigure(id + "-delivery", "delivery", "Delivery rate by channel", [accepted ?
      el("p", { className: "muted small note",
        text: "Delivered (or read) of the messages each channel accepted, as its provider reported them." }) :
      el("p", { className: "empty", text: "No message accepted in the last 30 days." })]));

    // 3. Fallback share, with the number and the savings as text.
    var fbAfter;
    if (!fb.messages) {
      fbAfter = [el("p", { className: "empty", text: "No fallback message in the last 30 days." })];
    } else {
      var saved = fb.savings ? (fb.savings.amount.charAt(0) === "-" ?
        "They cost " + fb.savings.amount.slice(1) + " " + fb.savings.currency + " more than SMS would have." :
        "Saved " + fb.savings.amount + " " + fb.savings.currency + " against sending them by SMS.") :
        "Savings not priced (no rate card).";
      fbAfter = [el("div", { className: "fb-facts" }, [
        el("p", { className: "fb-count" }, [
          el("strong", { text: plural(fb.messages, "fallback message", "fallback messages") }),
          ": sent with more than one channel and accepted on one."]),
        legend(CHANNELS.map(function (ch) {
          var n = fb.wonBy[ch] || 0;
          return { channel: ch, text: ch + ": " + n + " (" + percent(n, fb.messages) + ")" };
        })),
        el("p", { className: "fb-savings", text: saved })])];
    }
    charts.appendChild(chartFigure(id + "-fallback", "fallback", "Fallback share by winning channel", fbAfter));

    // 4. Cost per day.
    var costAfter = !currency ? [el("p", { className: "empty", text: "Not priced: no rate card (PUT /admin/rates)." })] :
      micros(cost) === 0 ? [el("p", { className: "empty", text: "No cost in the last 30 days." })] :
      [el("p", { className: "cost-total" }, ["Total ", el("strong", { text: cost + " " + currency })])];
    charts.appendChild(chartFigure(id + "-cost", "cost", "Cost per day" + (currency ? " (" + currency + ")" : ""),
      costAfter));
    box.appendChild(charts);

    // The totals per channel.
    box.appendChild(el("h3", { className: "totals-h", text: "Totals by channel" }));
    var cols = [["Messages", "messages"], ["Accepted", "accepted"], ["Delivered", "delivered"], ["Read", "read"],
      ["Failed", "failed"], ["Segments", "segments"]];
    box.appendChild(el("div", { className: "table-wrap" }, [el("table", { className: "usage-totals" }, [
      el("caption", { className: "sr-only", text: "Totals by channel, last 30 days" }),
      el("thead", null, [el("tr", null, [el("th", { scope: "col", text: "Channel" })].concat(cols.map(function (c) {
        return el("th", { scope: "col", className: "num", text: c[0] });
      })).concat([el("th", { scope: "col", className: "num", text: "Cost" })]))]),
      el("tbody", null, chRows.map(function (r) {
        var cells = [el("td", { "data-label": "Channel" }, [channelBadge(r.channel)])];
        cols.forEach(function (c) { cells.push(el("td", { "data-label": c[0], className: "num", text: String(r[c[1]]) })); });
        cells.push(el("td", { "data-label": "Cost", className: "num",
          text: r.cost ? r.cost.amount + " " + r.cost.currency : "not priced" }));
        return el("tr", { "data-channel": r.channel }, cells);
      }))])]));
    drawPlots(v);
    box.setAttribute("data-state", "ready");
  }

  // The width inside chart `kind`'s box, in CSS pixels.
  function chartWidth(box, kind) {
    var fig = box.querySelector("[data-chart=" + kind + "]"), cs = window.getComputedStyle(fig);
    return Math.floor(fig.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight));
  }

  // Draws (again) the pictures of view `v` at the width of their boxes.
  function drawPlots(v) {
    var box = $(v.box), d = v.data, id = v.box, days = d.days, fb = d.byChannel.fallback, currency = d.byDay.currency;
    var put = function (kind, node) {
      var p = box.querySelector("[data-chart=" + kind + "] .plot");
      p.textContent = "";
      if (node) p.appendChild(node);
      show(p, !!node);
    };
    v.width = chartWidth(box, "daily");

    var perChannel = {}, perDay = {};
    CHANNELS.forEach(function (ch) { perChannel[ch] = {}; });
    d.byDayChannel.rows.forEach(function (r) { if (perChannel[r.channel]) perChannel[r.channel][r.day] = r.messages; });
    d.byDay.rows.forEach(function (r) { perDay[r.day] = r; });
    var series = CHANNELS.map(function (ch) { return { key: ch, cls: "s-" + ch, values: perChannel[ch] }; });
    var busiest = null;
    days.forEach(function (day) {
      var n = CHANNELS.reduce(function (s, ch) { return s + (perChannel[ch][day] || 0); }, 0);
      if (n && (!busiest || n > busiest.n)) busiest = { day: day, n: n };
    });
    put("daily", dayBars({ id: id + "-daily-svg", width: v.width, days: days, series: series, whole: true,
      title: "Messages per day by channel, the last " + USAGE_DAYS + " days",
      desc: "Stacked bars, one a day from " + dayLabel(days[0]) + " to " + dayLabel(days[days.length - 1]) + ": " +
        series.map(function (s) {
          return s.key + " " + Object.keys(s.values).reduce(function (t, k) { return t + s.values[k]; }, 0);
        }).join(", ") + (busiest ? "; the busiest day " + dayLabel(busiest.day) + " with " + busiest.n + "." : "."),
      dayTitle: function (day) {
        return dayLabel(day) + ": " + plural(perDay[day] ? perDay[day].messages : 0, "message", "messages") + " (" +
          CHANNELS.filter(function (ch) { return perChannel[ch][day]; }).map(function (ch) {
            return ch + " " + perChannel[ch][day];
          }).join(", ") + ")";
      },
      segTitle: function (s, day) { return dayLabel(day) + ", " + s.key + ": " + s.values[day]; } }));

    var rows = d.byChannel.rows.filter(function (r) { return CHANNELS.indexOf(r.channel) >= 0; });
    put("delivery", rows.some(function (r) { return r.accepted > 0; }) ? deliveryBars({ id: id + "-delivery-svg",
      width: chartWidth(box, "delivery"), rows: rows, title: "Delivery rate by channel",
      desc: rows.map(function (r) {
        return r.channel + " " + (r.accepted ? percent(r.delivered, r.accepted) + " (" + r.delivered + " of " +
          r.accepted + ")" : "nothing accepted");
      }).join(", ") + "." }) : null);

    put("fallback", fb.messages ? fallbackRing({ id: id + "-fallback-svg", total: fb.messages,
      parts: CHANNELS.map(function (ch) { return { channel: ch, n: fb.wonBy[ch] || 0 }; }),
      title: "Fallback share by winning channel",
      desc: plural(fb.messages, "fallback message", "fallback messages") + ": " + CHANNELS.map(function (ch) {
        return ch + " won " + (fb.wonBy[ch] || 0);
      }).join(", ") + "." }) : null);

    var costs = {}, text = {}, priced = false;
    d.byDay.rows.forEach(function (r) {
      if (!r.cost || micros(r.cost.amount) <= 0) return;
      costs[r.day] = parseFloat(r.cost.amount); // placing a bar only; what is shown is the API's text
      text[r.day] = r.cost.amount;
      priced = true;
    });
    put("cost", currency && priced ? dayBars({ id: id + "-cost-svg", width: chartWidth(box, "cost"), days: days,
      series: [{ key: "cost", cls: "cost", values: costs, text: text }], whole: false,
      title: "Cost per day in " + currency + ", the last " + USAGE_DAYS + " days",
      desc: "A bar a day: " + Object.keys(text).sort().map(function (day) {
        return dayLabel(day) + " " + text[day];
      }).join(", ") + " " + currency + ".",
      dayTitle: function (day) { return dayLabel(day) + ": " + text[day] + " " + currency; },
      segTitle: function (s, day) { return dayLabel(day) + ": " + text[day] + " " + currency; } }) : null);
  }

  function openUsage() {
    markView("usage");
    status("");
    show($("tenants"), false);
    show($("tenant"), false);
    show($("usage"), true);
    state.tenant = null;
    loadUsage(usageViews.all, "/admin/usage");
  }

  function markView(name) {
    document.querySelectorAll(".view").forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-view") === name ? "true" : "false");
    });
  }

  // A new width: the pictures shown are drawn again for it (once a frame at most).
  var usageFrame = 0;
  function onResize() {
    if (usageFrame) return;
    usageFrame = window.requestAnimationFrame(function () {
      usageFrame = 0;
      Object.keys(usageViews).forEach(function (k) {
        var v = usageViews[k], box = $(v.box);
        if (v.data && box.offsetParent !== null && box.querySelector("[data-chart=daily]") &&
            chartWidth(box, "daily") !== v.width) drawPlots(v);
      });
    });
  }

  // ---- wiring -----------------------------------------------------------------------------------------

  function init() {
    buildEventBoxes();
    $("signin-form").addEventListener("submit", onSignIn);
    $("signout").addEventListener("click", function () { signOut(""); });
    $("search-form").addEventListener("submit", onSearch);
    $("tenant-more").addEventListener("click", function () { loadTenants(true); });
    $("create-form").addEventListener("submit", onCreate);
    $("tenant-back").addEventListener("click", openTenants);
    document.querySelectorAll(".view").forEach(function (b) {
      b.addEventListener("click", function () {
        if (b.getAttribute("data-view") === "usage") openUsage();
        else openTenants();
      });
    });
    window.addEventListener("resize", onResize);
    document.querySelectorAll(".tab").forEach(function (b) {
      b.addEventListener("click", function () { selectTab(b.getAttribute("data-tab")); });
    });
    $("settings-form").addEventListener("submit", onSaveSettings);
    $("token-form").addEventListener("submit", onCreateToken);
    $("token-done").addEventListener("click", function () { forget("token-once", "token-value"); });
    $("secret-done").addEventListener("click", function () { forget("secret-once", "secret-value"); });
    document.querySelectorAll(".copy").forEach(function (b) {
      b.addEventListener("click", function () { copyFrom(b.getAttribute("data-copy"), b); });
    });
    $("webhook-form").addEventListener("submit", onSaveWebhook);
    $("webhook-rotate").addEventListener("click", onRotate);
    $("webhook-delete").addEventListener("click", onDeleteWebhook);
    $("tpl-form").addEventListener("submit", onTemplates);
    $("tpl-more").addEventListener("click", function () { loadTemplates(true); });
    $("tpl-sync").addEventListener("click", onSyncTemplates);
    $("log-kind").addEventListener("change", function () { setLogKind($("log-kind").value); });
    $("logs-form").addEventListener("submit", onLogs);
    $("log-more").addEventListener("click", function () { loadLogs(true); });
    $("timeline-close").addEventListener("click", function () { $("timeline").close(); });
    $("in-form").addEventListener("submit", onInbound);
    $("in-more").addEventListener("click", function () { loadPage(pagers.inbound, true); });
    $("sup-form").addEventListener("submit", onSuppressions);
    $("sup-more").addEventListener("click", function () { loadPage(pagers.suppressions, true); });
    $("rcp-form").addEventListener("submit", onRecipient);
    $("rcp-in-more").addEventListener("click", function () { loadPage(pagers.recipientInbound, true); });
    $("qr-form").addEventListener("submit", onQr);
    ["start", "stop", "logout"].forEach(function (a) {
      $("qr-" + a).addEventListener("click", function () { qrAction(a); });
    });
    if (sessionStorage.getItem(TENANT_KEY)) resumeTenant();
    else if (sessionStorage.getItem(STORE_KEY)) signedIn();
    else signOut("");
  }

  document.addEventListener("DOMContentLoaded", init);
})();

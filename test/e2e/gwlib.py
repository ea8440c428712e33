"""Helpers for end-to-end tests of the gateway with a real PostgreSQL: a gateway factory on a
fresh database, JSON API calls, and admin shortcuts. Standard library only."""

import datetime
import json
import subprocess

import pytest

import oacheck
from conftest import assert_ok, base_env, omnigate_bin, stop_servers, wait_for

SECRET = "e2e-secret-0123456789abcdef"
ADMIN_TOKEN = "e2e-admin-token-0123456789"


def gateway_env(url, extra=None):
    env = {"OMNIGATE_DATABASE_URL": url, "OMNIGATE_SECRET": SECRET, "OMNIGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    if extra:
        env.update(extra)
    return env


def cli(args, url, extra_env=None, timeout=60):
    """Runs `omnigate <args>` against database `url`; returns CompletedProcess (text)."""
    return subprocess.run([omnigate_bin()] + list(args), env=base_env(gateway_env(url, extra_env)),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def migrate(url):
    p = cli(["migrate"], url)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def make_gateway(make_server, fresh_db):
    """Factory: make_gateway(workers=1, env=None, url=None) migrates the database (the test's
    fresh one unless `url` is given) and starts a gateway on it; .db_url is set on the server.
    Its gateways are stopped and checked before the test's database is dropped: a gateway whose
    database went away first may rightly spend OMNIGATE_DB_TIMEOUT_MS of its drain on a last
    write (a token's last use, a held outcome) waiting for it to come back."""
    made = []

    def factory(workers=1, env=None, url=None, args=()):
        db = url or fresh_db
        migrate(db)
        srv = make_server(args=args, env=gateway_env(db, env), workers=workers)
        srv.db_url = db
        made.append(srv)
        return srv

    yield factory
    stop_servers(made)


def call(srv, method, path, token=None, body=None, headers=None, timeout=10):
    """One JSON API request; dict/list bodies are JSON-encoded with Content-Type set."""
    hdrs = list(headers or [])
    if token is not None:
        hdrs.append(("Authorization", "Bearer " + token))
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if body is not None and not any(k.lower() == "content-type" for k, _ in hdrs):
        hdrs.append(("Content-Type", "application/json"))
    return srv.request(method, path, headers=hdrs, body=body, timeout=timeout)


def iso(t):
    """A Unix time as API.md's timestamps write it (UTC, milliseconds, Z): a `sendAt`."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def admin(srv, method, path, body=None, headers=None):
    return call(srv, method, path, token=ADMIN_TOKEN, body=body, headers=headers)


def new_tenant(srv, unified=True, settings=None, name="acme"):
    body = {"name": name, "unifiedApiEnabled": unified}
    if settings is not None:
        body["settings"] = settings
    return assert_ok(admin(srv, "POST", "/admin/tenants", body), 201)["data"]


def new_token(srv, tenant_id, scopes=None, name=None):
    body = {}
    if scopes is not None:
        body["scopes"] = scopes
    if name is not None:
        body["name"] = name
    return assert_ok(admin(srv, "POST", "/admin/tenants/%s/tokens" % tenant_id, body), 201)["data"]


def set_unified(srv, tenant_id, on):
    return assert_ok(admin(srv, "PATCH", "/admin/tenants/%s" % tenant_id, {"unifiedApiEnabled": on}))["data"]


# ---- the provider simulator ------------------------------------------------------------------

import os
import socket
import time
import urllib.request

from conftest import free_port

SIM_QR_KEY = "e2e-waha-key-0123"
SIM_SMS_SID = "AC0123456789abcdef0123456789abcdef"
SIM_SMS_TOKEN = "e2e-twilio-auth-token"
META_TOKEN = "EAAGe2eAccessToken0123456789"
WA_FROM = "6281234567890"

SETTINGS_ALL = {
    "defaultChannels": ["whatsapp_qr", "whatsapp_meta", "sms"],
    "defaultWhatsappFrom": WA_FROM,
    "channels": {
        "whatsapp_qr": {"enabled": True, "numbers": {WA_FROM: {"session": "default"}}},
        "whatsapp_meta": {"enabled": True, "numbers": {WA_FROM: {"phoneNumberId": "109876543210",
                                                                 "accessToken": META_TOKEN}}},
        "sms": {"enabled": True, "senders": ["ACME", "Omni Test"], "defaultSender": "ACME"},
    },
}


def sim_bin():
    path = os.environ.get("OMNIGATE_SIM_BIN")
    if not path:
        for cand in ("build-test/test/sim/omnigate-sim", "build/test/sim/omnigate-sim"):
            p = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), cand)
            if os.path.exists(p):
                return p
        pytest.skip("OMNIGATE_SIM_BIN is not set")
    return path


class Sim:
    """The provider simulator (test/sim) on a private loopback port."""

    def __init__(self, tmpdir, env=None):
        self.port = free_port()
        oacheck.forget_port(self.port)  # its answers are not the gateway's API
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(tmpdir, "sim-%d.stderr" % self.port)
        env = base_env(dict({"OMNIGATE_QR_API_KEY": SIM_QR_KEY, "OMNIGATE_SMS_ACCOUNT_SID": SIM_SMS_SID,
                             "OMNIGATE_SMS_AUTH_TOKEN": SIM_SMS_TOKEN, "OMNIGATE_ACCESS_LOG": "false"},
                            **(env or {})))
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sim_bin(), "--listen", "127.0.0.1:%d" % self.port], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError("simulator did not start: " + open(self.log_path).read()[-2000:])

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def rule(self, channel, behaviour, to=None, latency_ms=None, callback=None, callback_delay_ms=None):
        body = {"channel": channel, "behaviour": behaviour}
        if to is not None:
            body["to"] = to
        if latency_ms is not None:
            body["latencyMs"] = latency_ms
        if callback is not None:
            body["callback"] = callback
        if callback_delay_ms is not None:
            body["callbackDelayMs"] = callback_delay_ms
        return self._call("POST", "/__sim/rules", body)

    def callbacks(self):
        return self._call("GET", "/__sim/callbacks")["data"]["items"]

    def limit(self, channel, per_second, sender=None, burst=None):
        """A rate limit per sender at the simulator (test/sim/README.md): 429 past it."""
        body = {"channel": channel, "perSecond": per_second}
        if sender is not None:
            body["sender"] = sender
        if burst is not None:
            body["burst"] = burst
        return self._call("PUT", "/__sim/limits", body)

    def limits(self):
        return self._call("GET", "/__sim/limits")["data"]

    def clear(self):
        self._call("DELETE", "/__sim/rules")
        self._call("DELETE", "/__sim/requests")

    def requests(self, channel=None, to=None):
        q = []
        if channel:
            q.append("channel=" + channel)
        if to:
            q.append("to=" + urllib.request.quote(to))
        return self._call("GET", "/__sim/requests" + ("?" + "&".join(q) if q else ""))["data"]["items"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = Sim(str(tmp_path_factory.mktemp("sim")))
    yield s
    s.stop()


def provider_env(sim, extra=None):
    env = {"OMNIGATE_META_BASE_URL": sim.url, "OMNIGATE_QR_BASE_URL": sim.url, "OMNIGATE_QR_API_KEY": SIM_QR_KEY,
           "OMNIGATE_SMS_BASE_URL": sim.url, "OMNIGATE_SMS_ACCOUNT_SID": SIM_SMS_SID,
           "OMNIGATE_SMS_AUTH_TOKEN": SIM_SMS_TOKEN}
    if extra:
        env.update(extra)
    return env


def tenant_gateway(make_gateway, sim, workers=2, env=None):
    """A ready gateway on the test's database talking to the simulator (attempt timeout 1 s),
    with a tenant that has every channel (.tenant) and a token with every scope (.token)."""
    sim.clear()
    srv = make_gateway(workers=workers, env=provider_env(sim, dict({"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000"},
                                                                   **(env or {}))))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    srv.tenant = new_tenant(srv, settings=SETTINGS_ALL)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    return srv


def magic(qr=0, meta=0, sms=0, tail="0000"):
    """A recipient whose behaviour on each channel the simulator takes from its digits."""
    return "+1999%d%d%d%s" % (qr, meta, sms, tail)


def query_url(url, sql):
    """Runs `sql` with psql against `url`; returns rows as tuples of strings (NULL is "")."""
    p = subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-F", "\x1f", "-R", "\x1e", "-c", sql],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError("psql failed: %s" % p.stderr)
    out = p.stdout.rstrip("\n")
    if not out:
        return []
    return [tuple(r.split("\x1f")) for r in out.split("\x1e") if r != ""]


# ---- a gateway and a simulator that calls it back -----------------------------------------------

META_SECRET = "e2e-meta-app-secret-0123"
VERIFY_TOKEN = "e2e-verify-token-0123"
WAHA_SECRET = "e2e-waha-webhook-secret-0123"
WEBHOOK_ENV = {"OMNIGATE_META_APP_SECRET": META_SECRET, "OMNIGATE_META_VERIFY_TOKEN": VERIFY_TOKEN,
               "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET}


def linked_gateway(make_server, db_url, tmpdir, workers=2, env=None, sim=None, ready=True):
    """A gateway on `db_url` (migrated here) whose providers are a simulator that calls it back
    (--callback-url) with the same signing secrets, as production providers would. A new
    simulator is started unless `sim` is given (then its callbacks go to the gateway it was
    made for). Returns the server with .sim, .tenant and .token (a tenant with every channel),
    once /readyz says ready (not waited for when `ready` is false)."""
    migrate(db_url)
    srv = make_server(env=gateway_env(db_url, WEBHOOK_ENV), workers=workers, start=False)
    own_sim = sim is None
    if own_sim:
        sim = Sim(str(tmpdir), env={"OMNIGATE_SIM_CALLBACK_URL": "http://127.0.0.1:%d" % srv.port,
                                    "OMNIGATE_META_APP_SECRET": META_SECRET,
                                    "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET})
    srv.env.update(provider_env(sim, dict({"OMNIGATE_ATTEMPT_TIMEOUT_MS": "2000",
                                           "OMNIGATE_PUBLIC_URL": "http://127.0.0.1:%d" % srv.port},
                                          **(env or {}))))
    srv.db_url = db_url
    srv.start()
    srv.sim = sim
    srv.own_sim = own_sim
    assert not ready or wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    return srv


def add_tenant(srv):
    srv.tenant = new_tenant(srv, settings=SETTINGS_ALL)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    return srv

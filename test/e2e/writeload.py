"""Writes under load for the failover tests: client threads sending unified sends and OTPs with
Idempotency-Keys, and WAHA delivery statuses (signed webhooks) for sends already answered, to
one or more gateways, every request recorded (what was sent, when, the answer), then the failed
ones retried (with their keys) until they settle.

    load = WriteLoad(servers, token, clients=8)
    load.start(); ...; load.stop()
    load.outage(t_event)         # seconds without a successful write around t_event
    load.settle_failed(30)       # retries every failed request with its key
    load.acked("send")           # records answered 2xx

Each request has its own recipient, so what the provider simulator received can be counted per
request. Standard library only.
"""

import hashlib
import hmac
import json
import threading
import time

from conftest import Closed, Conn, request_bytes
from gwlib import WAHA_SECRET, query_url

# A recipient per request: no simulator rule or magic number applies to these, so every channel
# accepts (the first channel tried wins), and the OTP limits (per number) never trigger.
SEND_PREFIX = "+6281"
OTP_PREFIX = "+6285"


class Record:
    __slots__ = ("kind", "key", "path", "body", "to", "instance", "t0", "t1", "status", "data", "error",
                 "retries", "final", "headers", "msg_id")

    def __init__(self, kind, key, path, body, to, instance, headers=None, msg_id=None):
        self.kind, self.key, self.path, self.body, self.to, self.instance = kind, key, path, body, to, instance
        self.headers = headers  # in place of the token and key (a signed webhook)
        self.msg_id = msg_id  # a status: the provider message id it is about
        self.t0 = self.t1 = None
        self.status = None  # HTTP status, None when no answer came
        self.data = None
        self.error = None
        self.retries = 0
        self.final = None  # (status, data) once settled by settle_failed

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300


class WriteLoad:
    def __init__(self, servers, token, clients=8, otp_every=3, status_every=4, timeout=15.0,
                 pause_after_failure=0.05):
        self.servers = servers
        self.token = token
        self.clients = clients
        self.otp_every = otp_every  # every n-th request of a client is an OTP send
        # every n-th is a WAHA 'delivered' status for a send answered earlier (the gateways need
        # OMNIGATE_QR_WEBHOOK_SECRET = gwlib.WAHA_SECRET); 0: none
        self.status_every = status_every
        self._delivered = []  # WAHA message ids of answered sends, not yet given a status
        self.timeout = timeout
        self.pause = pause_after_failure
        self.records = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def _headers(self, key):
        return [("Authorization", "Bearer " + self.token), ("Content-Type", "application/json"),
                ("Idempotency-Key", key)]

    def _call(self, port, path, body, key, headers=None):
        with Conn(port, timeout=self.timeout) as c:
            c.send(request_bytes("POST", path, headers or self._headers(key), body))
            return c.read_response(timeout=self.timeout)

    def _status(self, seq, srv):
        """A 'delivered' (DEVICE) ack for a send answered earlier, or None when there is none."""
        with self._lock:
            if not self._delivered:
                return None
            msg_id = self._delivered.pop(0)
        body = json.dumps({"id": "evt_%d" % seq, "timestamp": int(time.time() * 1000), "event": "message.ack",
                           "session": "default", "payload": {"id": msg_id, "fromMe": True, "ack": 2,
                                                             "ackName": "DEVICE"}})
        sig = hmac.new(WAHA_SECRET.encode(), body.encode(), hashlib.sha512).hexdigest()
        headers = [("Content-Type", "application/json"), ("X-Webhook-Hmac-Algorithm", "sha512"),
                   ("X-Webhook-Hmac", sig)]
        return Record("status", "status-%07d" % seq, "/webhooks/waha", body, None, srv, headers, msg_id)

    def _client(self, i):
        n = 0
        while not self._stop.is_set():
            n += 1
            seq = i * 100000 + n
            srv = self.servers[(i + n) % len(self.servers)]
            rec = self._status(seq, srv) if self.status_every and n % self.status_every == 0 else None
            if rec is not None:
                pass
            elif n % self.otp_every == 0:
                to = "%s%07d" % (OTP_PREFIX, seq)
                rec = Record("otp", "otp-%07d" % seq, "/api/sms/otp/send", json.dumps({"to": to}), to, srv)
            else:
                to = "%s%07d" % (SEND_PREFIX, seq)
                rec = Record("send", "send-%07d" % seq, "/api/omni/send",
                             json.dumps({"to": to, "text": "failover %d" % seq}), to, srv)
            rec.t0 = time.monotonic()
            try:
                r = self._call(srv.port, rec.path, rec.body, rec.key, rec.headers)
                rec.status = r.status
                try:
                    rec.data = r.json().get("data")
                except ValueError:
                    pass
                if rec.kind == "send" and rec.ok:
                    qr = [a for a in rec.data["attempts"] if a["channel"] == "whatsapp_qr" and a["status"] == "sent"]
                    if qr:
                        with self._lock:
                            self._delivered.append(qr[0]["providerMessageId"])
            except (OSError, Closed) as e:
                rec.error = type(e).__name__
            rec.t1 = time.monotonic()
            with self._lock:
                self.records.append(rec)
            if not rec.ok:
                time.sleep(self.pause)

    def start(self):
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.clients)]
        for t in self._threads:
            t.start()
        return self

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)

    def snapshot(self):
        with self._lock:
            return list(self.records)

    def acked(self, kind=None):
        return [r for r in self.snapshot() if r.ok and (kind is None or r.kind == kind)]

    def failed(self):
        return [r for r in self.snapshot() if not r.ok]

    def ok_since(self, t):
        """Successful writes whose request was sent at or after monotonic time t."""
        return [r for r in self.snapshot() if r.ok and r.t0 >= t]

    def outage(self, t_event, t_after=None):
        """(gap, first): `gap` is the longest stretch without a successful write answer between
        the last 2xx answered before t_event and the first 2xx of a request sent after
        t_after (default t_event); `first` is how long after t_after that answer came.
        Answers to requests already in flight at t_event count: they are writes that made it."""
        t_after = t_event if t_after is None else t_after
        recs = [r for r in self.snapshot() if r.ok]
        sent_after = [r.t1 for r in recs if r.t0 >= t_after]
        if not sent_after:
            return float("inf"), float("inf")
        end = min(sent_after)
        times = sorted(r.t1 for r in recs)
        pts = [max([t for t in times if t <= t_event], default=t_event)]
        pts += [t for t in times if t_event < t <= end]
        gap = max(b - a for a, b in zip(pts, pts[1:])) if len(pts) > 1 else 0.0
        return gap, end - t_after

    def settle_failed(self, timeout):
        """Retries each failed request with its key and the same body (on the instance it went
        to) until it settles: 2xx, or 502 (delivery_failed / outcome_unknown). 409 (the first
        request's claim is still within its lease) and 503 are retried. Returns the records that
        did not settle within `timeout` seconds."""
        pending = self.failed()
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            left = []
            for rec in pending:
                rec.retries += 1
                try:
                    r = self._call(rec.instance.port, rec.path, rec.body, rec.key, rec.headers)
                except (OSError, Closed):
                    left.append(rec)
                    continue
                if 200 <= r.status < 300 or r.status == 502:
                    rec.final = (r.status, r.json())
                else:
                    left.append(rec)
            pending = left
            if pending:
                time.sleep(0.2)
        return pending


def check_failover(load, new_primary_url, sim):
    """Every acknowledged write is on the new primary with its attempts; every failed one
    settles when retried with its key; no recipient got a message twice."""
    sends, otps = load.acked("send"), load.acked("otp")
    refs = {r.data["reference"]: len(r.data["attempts"]) for r in sends}
    rows = dict(query_url(new_primary_url,
                          "SELECT m.reference, count(a.*) FROM messages m JOIN attempts a USING (tenant_id, reference) "
                          "WHERE m.status IN ('sent', 'delivered', 'read') GROUP BY m.reference"))
    found = [ref for ref, n in refs.items() if rows.get(ref) == str(n)]
    otp_refs = {r.data["reference"] for r in otps}
    otp_rows = {r[0] for r in query_url(new_primary_url,
                                        "SELECT o.reference FROM otp_requests o JOIN otp_events e "
                                        "ON e.tenant_id = o.tenant_id AND e.otp_reference = o.reference "
                                        "AND e.event = 'sent'")}
    statuses = {r.msg_id for r in load.acked("status")}
    status_rows = {r[0] for r in query_url(new_primary_url,
                                           "SELECT provider_message_id FROM delivery_statuses "
                                           "WHERE channel = 'whatsapp_qr' AND status = 'delivered'")}
    unsettled = load.settle_failed(40)
    per_to = {}
    for req in sim.requests():
        per_to[req["to"]] = per_to.get(req["to"], 0) + 1
    twice = {to: n for to, n in per_to.items() if n > 1}
    settled_as = {}
    for r in load.failed():
        if r.final is not None:
            what = "%d %s" % (r.final[0], (r.final[1].get("error") or {}).get("code", "ok"))
            settled_as[what] = settled_as.get(what, 0) + 1
    figures = {"sendsAcked": len(refs), "sendsFound": len(found), "otpsAcked": len(otp_refs),
               "otpsFound": len(otp_refs & otp_rows), "statusesAcked": len(statuses),
               "statusesFound": len(statuses & status_rows), "failed": len(load.failed()),
               "failedSettled": len(load.failed()) - len(unsettled), "settledAs": settled_as,
               "sentTwice": len(twice)}
    assert len(found) == len(refs), figures
    assert otp_refs <= otp_rows, figures
    assert statuses <= status_rows, figures
    assert unsettled == [], [(r.kind, r.key, r.status, r.error) for r in unsettled]
    assert twice == {}, twice
    # Every acknowledged write reached the provider exactly once.
    assert all(per_to.get(r.to) == 1 for r in sends + otps)
    return figures

"""Issue 17: automatic failover with pg_auto_failover (Debian's postgresql-15-auto-failover),
set up by deploy/ha.sh on loopback: a monitor, a primary and its synchronous secondary.

Two gateway instances (two workers each) take sends and OTPs with Idempotency-Keys, and
signed WAHA delivery statuses for the sends answered, from 8 clients; then either the primary's postmaster is SIGKILLed (its keeper lives on, reports it,
and demotes it when the monitor says so) or the primary's node dies whole (SIGKILL of its
pg_autoctl and postgres: the machine is gone, and the monitor must wait out
primary_demote_timeout). The monitor promotes the secondary. Without a restart the gateway
writes again; every send answered 2xx is on the new primary with all its attempts, every OTP
answered 2xx with its `sent` event and every status answered 200 in the attempt's history; the failed ones settle when retried with their keys; the
simulator got nothing twice. Then the old primary is back as the secondary, first in the host
list, and writes still go to the primary.

The figures (time without writes, acknowledged vs found) are printed (pytest -s) and written to
$OMNIGATE_HA_FIGURES.<postmaster|node>.json when OMNIGATE_HA_FIGURES is set.
"""

import json
import os
import time

import pytest

from conftest import wait_for
from gwlib import SETTINGS_ALL, WAHA_SECRET, call, gateway_env, migrate, new_tenant, new_token, provider_env, sim  # noqa: F401
from pgha import AutoFailover
from writeload import WriteLoad, check_failover

# The target and goal for the time without writes.
TARGET_S = 30.0
GOAL_S = 10.0


@pytest.fixture
def ha():
    cluster = AutoFailover()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("kill", ["postmaster", "node"])
def test_pg_auto_failover_loses_no_acknowledged_write(make_server, sim, ha, kill):
    url = ha.url
    migrate(url)
    sim.clear()
    env = provider_env(sim, {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000", "OMNIGATE_DB_TIMEOUT_MS": "2000",
                             "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET})
    inst = [make_server(env=gateway_env(url, env), workers=2) for _ in range(2)]
    for s in inst:
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 15), s.stderr()[-2000:]
    tenant = new_tenant(inst[0], settings=SETTINGS_ALL)
    token = new_token(inst[0], tenant["id"])["token"]
    old = ha.primary()
    new = [n for n in ha.NODES if n != old][0]
    assert ha.states()[new] == ("secondary", "secondary")

    load = WriteLoad(inst, token, clients=8).start()
    try:
        assert wait_for(lambda: len(load.acked()) >= 40, 30)
        t_kill = time.monotonic()
        if kill == "postmaster":
            ha.kill_postmaster(old)
        else:
            ha.kill(old)
        t_dead = time.monotonic()
        # The monitor's view: when it has the secondary promoted (wait_primary: no standby left).
        assert wait_for(lambda: ha.states()[new][0] in ("wait_primary", "primary"), 60, interval=0.1), ha.logs()
        t_promoted = time.monotonic()
        assert wait_for(lambda: len(load.ok_since(t_promoted)) >= 40, 60), \
            "\n".join(s.stderr()[-1500:] for s in inst)
    finally:
        load.stop()
    gap, first = load.outage(t_kill, t_dead)
    figures = check_failover(load, ha.node_url(new), sim)
    figures.update(kill=kill, withoutWritesSeconds=round(gap, 2), monitorPromotedAfterSeconds=round(t_promoted - t_dead, 2),
                   firstWriteAfterDeathSeconds=round(first, 2), targetSeconds=TARGET_S, goalSeconds=GOAL_S)

    # The old primary comes back (its keeper rejoins it, or `start` runs its node again) as the
    # secondary (pg_rewind if needed). It is first in the host list: the gateway still writes on
    # the primary.
    ha.start()
    assert ha.states()[old] == ("secondary", "secondary"), ha.states()
    r = call(inst[1], "POST", "/api/omni/send", token=token, body={"to": "+6281299999999", "text": "after rejoin"})
    assert r.status == 200, r

    print("\npg_auto_failover: %s" % json.dumps(figures))
    out = os.environ.get("OMNIGATE_HA_FIGURES")
    if out:
        with open("%s.%s.json" % (out, kill), "w") as f:
            json.dump(figures, f, indent=2)
    assert gap < TARGET_S, figures
    for s in inst:
        assert not [r for r in s.log_records() if "bad file descriptor" in r.get("error", "")]

"""The PostgreSQL test harness itself (pgcluster.py and deploy/pg.sh): a harness that lies is
worse than none, so every property the gateway tests rely on is checked here."""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse

import pytest

import pgcluster
from pgcluster import PgCluster, PgError
# The module's own fixtures, so this file tests pgcluster.py whatever conftest.py imports.
pg_session = pgcluster.pg_session
pg_private = pgcluster.pg_private
fresh_db = pgcluster.fresh_db

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PG_SH = os.path.join(ROOT, "deploy", "pg.sh")


def db_of(url):
    return urllib.parse.unquote(urllib.parse.urlparse(url).path.lstrip("/"))


def tcp_refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def alive(pid):
    return pgcluster._alive(pid)


def server_pids(pg):
    return [pg.pid] + pgcluster._children(pg.pid)


def psql_cli(url, sql):
    """psql from PATH on a URL, the way gwlib.query_url and the tests' pg_dump calls use it."""
    return subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True,
                          text=True, timeout=30)


# --------------------------------------------------------------------------------------------
# The session cluster and fresh databases


def test_session_cluster_answers(pg_session):
    assert pg_session.psql("select 1") == "1\n"
    assert pg_session.query("select 1, 'two'") == [("1", "two")]
    assert pg_session.scalar("select current_user") == "omnigate"
    assert pg_session.scalar("select current_database()") == "omnigate"
    # url goes over the private unix socket, tcp_url over 127.0.0.1: both work with libpq tools.
    assert "host=%s" % pg_session.socket_dir in pg_session.url
    assert psql_cli(pg_session.url, "select inet_server_addr() is null").stdout == "t\n"
    assert psql_cli(pg_session.tcp_url, "select inet_server_addr()").stdout == "127.0.0.1\n"


def test_role_is_an_ordinary_owner_not_a_superuser(pg_session):
    """Like deploy/pg.sh: the gateway's role owns its database; no test may rely on superuser."""
    assert pg_session.query("select rolsuper::text, rolcreatedb::text from pg_roles where rolname = current_user") \
        == [("false", "false")]
    assert pg_session.scalar("select pg_get_userbyid(datdba) from pg_database where datname = 'omnigate'") \
        == "omnigate"
    assert pg_session.scalar("select rolsuper::text from pg_roles where rolname = current_user",
                             db="postgres", user="postgres") == "true"


def test_fresh_db_is_empty_and_isolated(pg_session, fresh_db):
    name = db_of(fresh_db)
    assert name.startswith("t_") and name != "omnigate"
    q = "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace " \
        "where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')"
    assert pg_session.scalar(q, db=name) == "0"
    assert psql_cli(fresh_db, "select current_database(), current_user").stdout == "%s|omnigate\n" % name
    assert pg_session.scalar("select pg_get_userbyid(datdba) from pg_database where datname = current_database()",
                             db=name) == "omnigate"
    # The owner can build a schema in it (PostgreSQL 15 restricts the public schema to its owner).
    pg_session.psql("create table only_here (a int); insert into only_here values (1)", db=name)
    assert pg_session.query("select to_regclass('only_here')") == [(None,)]
    other = pg_session.create_database("t_other_" + name[2:])
    try:
        assert pg_session.query("select to_regclass('only_here')", db=db_of(other)) == [(None,)]
    finally:
        pg_session.drop_database(db_of(other))


def test_fresh_db_is_dropped_even_with_open_sessions(pg_session):
    ctx = pgcluster.temp_database(pg_session)  # what the fresh_db fixture runs
    url = ctx.__enter__()
    name = db_of(url)
    holder = subprocess.Popen(["psql", url, "-XAtq", "-c", "select pg_sleep(60)"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while pg_session.scalar("select count(*) from pg_stat_activity where datname = '%s'" % name) == "0":
            assert time.monotonic() < deadline, "psql never connected"
            time.sleep(0.05)
        ctx.__exit__(None, None, None)  # the fixture's teardown: DROP DATABASE ... WITH (FORCE)
        assert pg_session.scalar("select count(*) from pg_database where datname = '%s'" % name) == "0"
        assert holder.wait(timeout=10) != 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


# --------------------------------------------------------------------------------------------
# SQL helpers


def test_query_round_trips_awkward_values(pg_session):
    values = ["a|b", "tab\there", "line1\nline2", "crlf\r\n", "\r", "quote\"s", "it's", "comma,here",
              " padded ", "", "\x1f\x1e unit/record separators", "ünïcødé ✓", "\\backslash\\", "NULL", "a\x01b"]
    sql = "select " + ", ".join("$q$%s$q$" % v for v in values) + ", null"
    rows = pg_session.query(sql)
    assert rows == [tuple(values) + (None,)]
    assert pg_session.query("select null, ''", null="<null>") == [("<null>", "")]
    # Several statements and several rows; statements without rows add none.
    assert pg_session.query("create temp table t (a int); insert into t values (1), (2); "
                            "select a from t order by a; select 'x' where false") == [("1",), ("2",)]
    assert pg_session.query("select 1 where false") == []


def test_psql_raises_with_the_server_message(pg_session):
    with pytest.raises(PgError, match="no_such_column"):
        pg_session.psql("select no_such_column")
    # ON_ERROR_STOP: nothing after the failing statement runs.
    with pytest.raises(PgError):
        pg_session.psql("create temp table x (a int); select 1/0; select pg_sleep(30)")


def test_pg_dump_contains_a_table_created_in_the_test(pg_session, fresh_db):
    name = db_of(fresh_db)
    pg_session.psql("create table dumped_tbl (id int primary key, note text); "
                    "insert into dumped_tbl values (42, 'needle-7f3a')", db=name)
    dump = pg_session.pg_dump(db=name)
    assert "CREATE TABLE public.dumped_tbl" in dump
    assert "needle-7f3a" in dump
    assert "dumped_tbl" not in pg_session.pg_dump()  # the omnigate database is another one
    # The URL works for pg_dump from PATH too (test_tenants/test_otp dump gw.db_url).
    p = subprocess.run(["pg_dump", fresh_db], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "needle-7f3a" in p.stdout, p.stderr


# --------------------------------------------------------------------------------------------
# Stop, start, kill


def test_stop_then_start_keeps_port_data_and_url(pg_private):
    pg = pg_private
    pg.psql("create table keep (v text); insert into keep values ('survives')")
    port, url, sock, pid = pg.port, pg.url, pg.socket_dir, pg.pid
    pg.stop()
    assert not pg.running and not alive(pid)
    with pytest.raises(PgError):
        pg.psql("select 1")
    assert psql_cli(url, "select 1").returncode != 0
    assert tcp_refused(port)
    pg.stop()  # idempotent
    pg.start()
    assert (pg.port, pg.url, pg.socket_dir) == (port, url, sock)
    assert pg.query("select v from keep") == [("survives",)]
    assert psql_cli(url, "select 1").stdout == "1\n"
    pg.start()  # a no-op when running
    pg.restart()
    assert pg.port == port and pg.scalar("select v from keep") == "survives"


def test_kill_then_start_recovers_committed_data(pg_private):
    pg = pg_private
    pg.psql("create table acked (id int)")
    pg.psql("insert into acked select generate_series(1, 1000)")
    pids = server_pids(pg)
    assert len(pids) > 3
    pg.kill()
    assert not any(alive(p) for p in pids), "server processes survived kill()"
    assert tcp_refused(pg.port)
    with pytest.raises(PgError):
        pg.psql("select 1")
    pg.start()
    # Acknowledged commits survive a crash (synchronous_commit stays on with fast=True).
    assert pg.scalar("select count(*) from acked") == "1000"
    assert "not properly shut down" in pg.log_tail(200) or "automatic recovery" in pg.log_tail(200)
    # Killing only the postmaster: its children notice and exit; start() waits for them.
    pg.kill(children=False)
    pg.start()
    assert pg.scalar("select count(*) from acked") == "1000"
    pg.stop("immediate")
    pg.start()
    assert pg.scalar("select count(*) from acked") == "1000"


def test_first_start_moves_off_a_taken_port():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        taken = squatter.getsockname()[1]
        pg = PgCluster()
        try:
            pg._port = taken  # as if another process had grabbed the free port meanwhile
            pg.start()
            assert pg.port != taken
            assert pg.psql("select 1") == "1\n"
        finally:
            pg.cleanup()


def test_settings_fast_and_durable():
    with PgCluster(fast=True) as fast:
        assert fast.query("select current_setting('fsync'), current_setting('full_page_writes'), "
                          "current_setting('synchronous_commit'), current_setting('max_connections'), "
                          "current_setting('shared_buffers'), current_setting('server_encoding'), "
                          "current_setting('listen_addresses')") \
            == [("off", "off", "on", "200", "128MB", "UTF8", "127.0.0.1")]
    with PgCluster(fast=False, settings={"work_mem": "8MB"}) as durable:
        assert durable.query("select current_setting('fsync'), current_setting('full_page_writes'), "
                             "current_setting('synchronous_commit'), current_setting('work_mem')") \
            == [("on", "on", "on", "8MB")]


def test_cleanup_leaves_no_process_and_no_directory():
    with pytest.raises(ZeroDivisionError):
        with PgCluster() as pg:
            pids, base = server_pids(pg), pg.base_dir
            1 / 0
    assert not any(alive(p) for p in pids)
    assert not os.path.exists(base)
    pg.cleanup()  # idempotent
    with pytest.raises(PgError):
        pg.start()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs a separate server user")
def test_as_root_the_server_runs_as_the_server_user(pg_session):
    name, uid, _ = pgcluster.server_user()
    with open("/proc/%d/status" % pg_session.pid) as f:
        uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
    assert uids == [str(uid)] * 4, (name, uids)
    assert os.stat(pg_session.data_dir).st_uid == uid


# --------------------------------------------------------------------------------------------
# deploy/pg.sh


def pg_sh(*args):
    return subprocess.run(["bash", PG_SH] + [str(a) for a in args], capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)


def check_pg_sh_cycle(d, port):
    url = "postgresql://omnigate@127.0.0.1:%d/omnigate" % port
    try:
        first = pg_sh("start", d, port)
        assert first.returncode == 0, first.stderr
        assert first.stdout == url + "\n", first.stdout  # exactly one line on stdout
        again = pg_sh("start", d, port)
        assert again.returncode == 0, again.stderr
        assert again.stdout == url + "\n"
        assert "already running" in again.stderr
        p = psql_cli(url, "select current_user, current_database(), current_setting('fsync'), "
                          "current_setting('synchronous_commit'), rolsuper from pg_roles where rolname = current_user")
        assert p.stdout == "omnigate|omnigate|on|on|f\n", p.stderr
        st = pg_sh("status", d)
        assert st.returncode == 0 and st.stdout == "running: %s\n" % url, (st.stdout, st.stderr)
        assert psql_cli(url, "create table t (a int); insert into t values (7)").returncode == 0

        stop = pg_sh("stop", d)
        assert stop.returncode == 0, stop.stderr
        assert tcp_refused(port)
        st = pg_sh("status", d)
        assert st.returncode == 3 and st.stdout == "stopped\n"
        assert pg_sh("stop", d).returncode == 0  # idempotent

        # Restart without PORT: the port DIR was created with, and the data is still there.
        third = pg_sh("start", d)
        assert third.returncode == 0 and third.stdout == url + "\n", third.stderr
        assert psql_cli(url, "select a from t").stdout == "7\n"
    finally:
        pg_sh("stop", d)


def test_deploy_pg_sh_start_status_stop():
    base = tempfile.mkdtemp(prefix="omnigate-pgsh-", dir="/tmp")
    os.chmod(base, 0o755)
    try:
        check_pg_sh_cycle(os.path.join(base, "pg"), pgcluster.free_port())
        assert os.path.isfile(os.path.join(base, "pg", "data", "PG_VERSION"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the private-parent case only arises as root")
def test_deploy_pg_sh_under_a_private_parent_relocates():
    """A clone under /root: the postgres user cannot traverse the parent, so the cluster lives
    in /var/lib/omnigate/pg-<hash> and DIR is a symlink to it; no permission is loosened."""
    base = tempfile.mkdtemp(prefix="omnigate-pgsh-private-", dir="/tmp")  # mode 0700, like /root
    d = os.path.join(base, "repo", ".omnigate", "pg")
    try:
        check_pg_sh_cycle(d, pgcluster.free_port())
        assert os.path.islink(d)
        real = os.path.realpath(d)
        assert re.match(r"^/var/lib/omnigate/pg-[0-9a-f]{12}$", real), real
        assert os.path.isfile(os.path.join(real, "data", "PG_VERSION"))
        assert os.stat(base).st_mode & 0o777 == 0o700  # untouched
    finally:
        if os.path.islink(d):
            shutil.rmtree(os.path.realpath(d), ignore_errors=True)
            try:
                os.rmdir("/var/lib/omnigate")  # only when nothing else lives there
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# pgha.py: the streaming standby the failover tests use


def test_standby_streams_refuses_writes_and_promotes(pg_private):
    import pgha
    pg_private.psql("create table t (a int); insert into t values (1)")
    standby = pgha.make_standby(pg_private)
    try:
        assert standby.in_recovery()
        assert standby.query("select a from t") == [("1",)]
        pg_private.psql("insert into t values (2)")
        assert wait_standby(standby, "select count(*) from t", "2")
        with pytest.raises(PgError, match="read-only"):
            standby.psql("insert into t values (3)")
        standby.promote()
        assert not standby.in_recovery()
        standby.psql("insert into t values (3)")
        assert standby.scalar("select count(*) from t") == "3"
        assert pg_private.scalar("select count(*) from t") == "2"  # diverged: a promotion, not a copy
    finally:
        standby.cleanup()


def wait_standby(standby, sql, want, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if standby.scalar(sql) == want:
            return True
        time.sleep(0.05)
    return False

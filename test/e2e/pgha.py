"""PostgreSQL high availability and pooling for the end-to-end tests, with the real tools from
Debian, started on loopback by the harness:

    standby = make_standby(primary)        # a streaming replica of a PgCluster (pg_basebackup -R)
    standby.promote()                      # pg_promote(): it becomes a primary

    with AutoFailover(tmp) as ha:          # deploy/ha.sh: pg_auto_failover monitor + 2 nodes
        url = ha.url                       # both nodes, target_session_attrs=read-write
        ha.kill(ha.primary())              # SIGKILL of the primary's pg_autoctl and postgres
        ha.wait_primary(other)             # the monitor promoted the other node

    with PgBouncer(tmp, cluster, pool_mode="transaction", pool_size=4) as pgb:
        pgb.url_for("omnigate")            # the gateway's OMNIGATE_DATABASE_URL through it
        pgb.show("POOLS")                  # the admin console

A test that needs a package skips with the apt-get line to run when its program is missing
(`require`); deploy/install-deps.sh installs them all, so in CI nothing is skipped.
Standard library only (and pytest for the skip).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

try:
    import pytest
except ImportError:  # the benchmarks use PgBouncer without pytest
    pytest = None

import pgcluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HA_SH = os.path.join(ROOT, "deploy", "ha.sh")
PGBOUNCER = "/usr/sbin/pgbouncer"
PG_AUTOCTL = "/usr/bin/pg_autoctl"


def require(path, package):
    """`path` when it is installed, else skip the test naming the Debian package (outside
    pytest: raise)."""
    if os.access(path, os.X_OK):
        return path
    if pytest is None:
        raise RuntimeError("%s is not installed: apt-get install %s" % (path, package))
    pytest.skip("%s is not installed: apt-get install %s (or bash deploy/install-deps.sh)" % (path, package))


def free_port_block(n, low=20000, high=32000):
    """The first of `n` consecutive loopback ports that are free now, below Linux's ephemeral
    range (32768-60999): there no outgoing connection can hold one of them as its local port
    when a server wants to bind it later (pg_autoctl picks its ports at creation and binds
    them again at every start)."""
    rng = random.Random(os.getpid() ^ int(time.monotonic() * 1000))
    for _ in range(200):
        base = rng.randrange(low, high - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d free consecutive ports in %d-%d" % (n, low, high))


def _as_server_user():
    user = pgcluster.server_user()
    if user is None:
        return {}
    return {"user": user[1], "group": user[2], "extra_groups": []}


def _server_dir(prefix):
    """A directory under /tmp the server user can use (mode 0755, its owner when root)."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)
    user = pgcluster.server_user()
    if user:
        os.chown(d, user[1], user[2])
    return d


# --------------------------------------------------------------------------------------------
# A streaming standby of a PgCluster


class Standby(pgcluster.PgCluster):
    """A PgCluster whose data directory is a base backup of `primary` with its replication
    settings (-R): it starts as a hot standby streaming from the primary, read-only until
    promote()."""

    def __init__(self, primary, settings=None):
        base = tempfile.mkdtemp(prefix=pgcluster.DIR_PREFIX, dir="/tmp")
        with open(os.path.join(base, "owner"), "w") as f:
            f.write(pgcluster._owner_tag())
        os.chmod(base, 0o755)
        data = os.path.join(base, "data")
        run = os.path.join(base, "run")
        user = pgcluster.server_user()
        os.mkdir(data, 0o700)
        os.mkdir(run, 0o755)
        if user:
            for d in (data, run):
                os.chown(d, user[1], user[2])
        conn = "host=%s port=%d user=postgres" % (primary.socket_dir, primary.port)
        p = subprocess.run([os.path.join(primary.bindir, "pg_basebackup"), "-d", conn, "-D", data, "-R",
                            "-X", "stream", "--checkpoint=fast", "--no-sync"],
                           cwd="/", env=pgcluster._client_env(), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=120, **_as_server_user())
        if p.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            raise pgcluster.PgError("pg_basebackup failed: %s" % p.stderr)
        super().__init__(base_dir=base, fast=primary.fast, settings=settings)
        self._owns_base = True
        self._bootstrapped = True  # the role and database came with the backup

    def promote(self, timeout=30):
        """Ends recovery (pg_promote waits for it) and returns once it accepts writes."""
        self.psql("SELECT pg_promote(true, %d)" % timeout, db="postgres", user="postgres", timeout=timeout + 10)
        deadline = time.monotonic() + timeout
        while self.scalar("SELECT pg_is_in_recovery()::text", user="postgres") != "false":
            assert time.monotonic() < deadline, "standby still in recovery"
            time.sleep(0.05)

    def in_recovery(self):
        return self.scalar("SELECT pg_is_in_recovery()::text", user="postgres") == "true"


def make_standby(primary, settings=None):
    """A started hot standby of `primary`, caught up with it."""
    s = Standby(primary, settings=settings)
    s.start()
    lsn = primary.scalar("SELECT pg_current_wal_lsn()", user="postgres")
    deadline = time.monotonic() + 30
    while s.scalar("SELECT pg_last_wal_replay_lsn() >= '%s'::pg_lsn" % lsn, user="postgres") != "t":
        assert time.monotonic() < deadline, "standby did not catch up"
        time.sleep(0.05)
    return s


# --------------------------------------------------------------------------------------------
# pg_auto_failover through deploy/ha.sh


class AutoFailover:
    """deploy/ha.sh on a private folder and private ports: a monitor and node1/node2. The
    nodes run as the server user (see pgcluster); everything stops and is removed on close."""

    NODES = ("node1", "node2")

    def __init__(self, base_dir=None):
        require(PG_AUTOCTL, "postgresql-15-auto-failover")
        self.base = base_dir or _server_dir("omnigate-ha-")
        self.dir = os.path.join(self.base, "ha")
        self.port = free_port_block(3)
        self.url = None

    def _sh(self, *args, timeout=240, check=True):
        p = subprocess.run(["bash", HA_SH] + list(args), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, env=pgcluster._client_env())
        if check and p.returncode != 0:
            raise pgcluster.PgError("ha.sh %s failed (exit %d):\n%s\n%s" % (
                " ".join(args), p.returncode, p.stderr[-3000:], self.logs()))
        return p

    def start(self):
        """Creates (first time) and starts everything; waits for a primary and its
        synchronous secondary. Returns the gateway's URL."""
        p = self._sh("start", self.dir, str(self.port))
        self.url = p.stdout.strip().splitlines()[-1]
        return self.url

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self._sh("stop", self.dir, timeout=120, check=False)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def node_port(self, node):
        return self.port + 1 + self.NODES.index(node)

    def node_url(self, node, db="omnigate", user="omnigate"):
        return "postgresql://%s@127.0.0.1:%d/%s" % (user, self.node_port(node), db)

    def monitor(self, sql):
        """Rows of `sql` on the monitor's database."""
        p = subprocess.run(["psql", "-XAtq", "-F", "|", "-v", "ON_ERROR_STOP=1", "-d",
                            "postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable" % self.port,
                            "-c", sql], capture_output=True, text=True, timeout=30, env=pgcluster._client_env())
        if p.returncode != 0:
            raise pgcluster.PgError("monitor query failed: %s" % p.stderr)
        return [tuple(line.split("|")) for line in p.stdout.splitlines() if line]

    def states(self):
        """{node: (reported state, goal state)}"""
        return {n: (r, g) for n, r, g in self.monitor("SELECT nodename, reportedstate, goalstate "
                                                      "FROM pgautofailover.node")}

    def primary(self):
        """The node the monitor wants read-write (primary, wait_primary or single)."""
        rows = self.monitor("SELECT nodename FROM pgautofailover.node "
                            "WHERE goalstate IN ('primary', 'wait_primary', 'single')")
        return rows[0][0] if len(rows) == 1 else None

    def kill(self, node):
        """SIGKILL of the node's whole process group (pg_autoctl, postgres and its backends)."""
        self._sh("kill", node, self.dir, timeout=30)

    def kill_postmaster(self, node):
        """SIGKILL of the node's postmaster alone (its backends follow it; its keeper lives on)."""
        with open(os.path.join(self.dir, node, "postmaster.pid")) as f:
            pid = int(f.readline())
        os.kill(pid, signal.SIGKILL)

    def accepts_writes(self, node):
        p = subprocess.run(["psql", "-XAtq", "-d", self.node_url(node, "postgres", "postgres") + "?connect_timeout=2",
                            "-c", "SELECT pg_is_in_recovery()"], capture_output=True, text=True, timeout=30,
                           env=pgcluster._client_env())
        return p.returncode == 0 and p.stdout.strip() == "f"

    def logs(self, n=30):
        out = []
        for name in ("monitor",) + self.NODES:
            path = os.path.join(self.dir, name + ".log")
            try:
                with open(path, errors="replace") as f:
                    out.append("== %s\n%s" % (path, "".join(f.readlines()[-n:])))
            except OSError:
                pass
        return "\n".join(out)


# --------------------------------------------------------------------------------------------
# PgBouncer


class PgBouncer:
    """Debian's pgbouncer on a private loopback port with its own ini, in front of `cluster`
    (anything with .socket_dir and .port: a PgCluster; its unix socket). trust authentication: the users are listed in the
    userlist file without passwords. Runs as the server user when we are root (PgBouncer
    refuses to run as root)."""

    def __init__(self, cluster, pool_mode="transaction", pool_size=4, max_client_conn=200, settings=None,
                 max_db_connections=0, databases=None):
        require(PGBOUNCER, "pgbouncer")
        self.cluster = cluster
        self.dir = _server_dir("omnigate-pgbouncer-")
        self.port = free_port_block(1)
        self.ini = os.path.join(self.dir, "pgbouncer.ini")
        self.log_path = os.path.join(self.dir, "pgbouncer.log")
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            f.write('"omnigate" ""\n"postgres" ""\n')
        conf = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": os.path.join(self.dir, "userlist.txt"),
            "pool_mode": pool_mode,
            "default_pool_size": pool_size,
            "min_pool_size": 0,
            "reserve_pool_size": 0,
            "max_client_conn": max_client_conn,
            "max_db_connections": max_db_connections,
            "admin_users": "postgres",
            "stats_users": "omnigate",
            "logfile": self.log_path,
            "pidfile": os.path.join(self.dir, "pgbouncer.pid"),
            "server_check_delay": 1,
            "log_connections": 0,
            "log_disconnections": 0,
        }
        conf.update(settings or {})
        # `databases`: more entries, {alias: "dbname=... pool_mode=session"} (PgBouncer's syntax).
        target = "host=%s port=%d" % (cluster.socket_dir, cluster.port)
        lines = ["[databases]"] + ["%s = %s %s" % (k, target, v) for k, v in (databases or {}).items()]
        lines += ["* = " + target, "", "[pgbouncer]"] + ["%s = %s" % kv for kv in conf.items()]
        with open(self.ini, "w") as f:
            f.write("\n".join(lines) + "\n")
        user = pgcluster.server_user()
        if user:
            for name in os.listdir(self.dir):
                os.chown(os.path.join(self.dir, name), user[1], user[2])
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([PGBOUNCER, self.ini], cwd=self.dir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=pgcluster._set_pdeathsig, **_as_server_user())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pgbouncer exited with %d:\n%s" % (self.proc.returncode, self.log_tail()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("pgbouncer did not listen within 20 s:\n" + self.log_tail())

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # safe shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url_for(self, db, user="omnigate"):
        return "postgresql://%s@127.0.0.1:%d/%s" % (user, self.port, db)

    def show(self, what):
        """Rows (dicts) of SHOW <what> on the admin console."""
        p = subprocess.run(["psql", "-X", "--csv", "-d", self.url_for("pgbouncer", "postgres"), "-c", "SHOW " + what],
                           capture_output=True, text=True, timeout=30, env=pgcluster._client_env())
        if p.returncode != 0:
            raise RuntimeError("SHOW %s failed: %s" % (what, p.stderr))
        import csv
        import io
        return list(csv.DictReader(io.StringIO(p.stdout)))

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

"""A throwaway PostgreSQL cluster for the end-to-end tests and the benchmarks.

    with PgCluster() as pg:             # initdb in a temp dir, start, role+db "omnigate"
        pg.psql("CREATE TABLE t (a int)")
        pg.query("SELECT a, 'x|y' FROM t")  # -> [("1", "x|y"), ...]
        url = pg.url                    # hand to the gateway as OMNIGATE_DATABASE_URL
        pg.stop(); pg.start()           # same data dir, same port, same socket
        pg.kill(); pg.start()           # SIGKILL (a crash), then crash recovery
        with pg.replica() as r:         # a hot standby streaming from pg (pg_basebackup -R)
            r.wait_replayed(pg)         # until it has replayed everything pg has written so far

The postmaster is started directly (not through pg_ctl) as a child of this process, so its
exit is observed and reaped here, and it gets SIGQUIT (immediate shutdown) if this process
dies without cleaning up. Teardown (stop, then remove the directory) runs from the context
manager, the fixtures and an atexit handler. Directories left by a process that was SIGKILLed
are swept by the next PgCluster.

As root, PostgreSQL refuses to run, so initdb and the server run as the `postgres` user (or a
system user `omnigate-pg` created on demand) and the cluster's directories are made its own.

Standard library only. Pytest fixtures at the bottom: pg_session, pg_private, fresh_db,
pg_replica.
"""

import atexit
import contextlib
import csv
import errno
import glob
import io
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse
import uuid

try:
    import pytest
except ImportError:  # the module is usable without pytest (benchmarks)
    pytest = None

START_TIMEOUT = 30.0
STOP_TIMEOUT = 60.0
DIR_PREFIX = "omnigate-pg-"
ROLE = "omnigate"
DATABASE = "omnigate"
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; ".s.PGSQL.65535" needs 15 of them

_STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class PgError(RuntimeError):
    """A PostgreSQL command failed; the message carries its stderr."""


# --------------------------------------------------------------------------------------------
# Host helpers


def bindir():
    """The newest /usr/lib/postgresql/<major>/bin holding a server (OMNIGATE_PG_BINDIR wins)."""
    env = os.environ.get("OMNIGATE_PG_BINDIR")
    if env:
        return env
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        major = d.split("/")[-2]
        if os.access(os.path.join(d, "postgres"), os.X_OK):
            try:
                found.append((float(major), d))
            except ValueError:
                pass
    if not found:
        raise PgError("no PostgreSQL server under /usr/lib/postgresql/*/bin "
                      "(install postgresql-15: bash deploy/install-deps.sh)")
    return max(found)[1]


_HANDED_OUT = set()


def free_port():
    """A loopback port nobody listens on right now and this test process has not handed out
    before. The second condition matters: the port is free again as soon as this probe closes,
    so a later call could return it before its first taker binds it, and the gateway and the
    simulator bind with SO_REUSEPORT, which lets two processes share a port silently (each
    then gets some of the other's connections)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def server_user():
    """(name, uid, gid) of the account that runs the server: None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "omnigate-pg"):
        try:
            pw = pwd.getpwnam(name)
            return name, pw.pw_uid, pw.pw_gid
        except KeyError:
            pass
    subprocess.run(["useradd", "-r", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "omnigate-pg"],
                   check=True, capture_output=True)
    pw = pwd.getpwnam("omnigate-pg")
    return "omnigate-pg", pw.pw_uid, pw.pw_gid


def _reachable(path, uid, gid):
    """True when `uid` (primary group `gid`) may traverse every directory down to `path`."""
    if uid == 0:
        return True
    groups = {gid} | {g.gr_gid for g in _groups_of(uid)}
    p = os.path.abspath(path)
    parts = [p]
    while p != "/":
        p = os.path.dirname(p)
        parts.append(p)
    for d in parts:
        st = os.stat(d)
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _groups_of(uid):
    import grp
    name = pwd.getpwuid(uid).pw_name
    return [g for g in grp.getgrall() if name in g.gr_mem]


def _proc_state(pid):
    """The /proc state letter of `pid`, or None when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _alive(pid):
    """Running and not a zombie (an unreaped zombie holds no shared memory and no socket)."""
    st = _proc_state(pid)
    return st is not None and st not in ("Z", "X")


def _start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _locale():
    """C.UTF-8 when the C library has it (Debian 12 does), else C."""
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "C"
    names = {x.strip().lower().replace("-", "") for x in out.split()}
    return "C.UTF-8" if "c.utf8" in names else "C"


def _conf_value(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return str(v)
    return "'%s'" % str(v).replace("'", "''")


def quote_ident(name):
    return '"%s"' % name.replace('"', '""')


def _client_env():
    """The caller's environment without PG* settings that could redirect our commands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGCLIENTENCODING"] = "UTF8"
    env["LC_MESSAGES"] = "C"
    return env


def _set_pdeathsig():
    """In the child before exec: SIGQUIT (immediate shutdown) when this process dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGQUIT), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _owner_tag():
    return "%d %s\n" % (os.getpid(), _start_time(os.getpid()))


def sweep_stale(tmp="/tmp"):
    """Removes cluster directories whose creating process is gone and whose server is not
    running (left behind by a SIGKILLed test run). Returns the removed paths."""
    removed = []
    for base in glob.glob(os.path.join(tmp, DIR_PREFIX + "*")):
        try:
            with open(os.path.join(base, "owner")) as f:
                pid_s, start = f.read().split()
            pid = int(pid_s)
        except (OSError, ValueError):
            continue
        if _alive(pid) and _start_time(pid) == start:
            continue
        pm = _postmaster_pid(os.path.join(base, "data"))
        if pm is not None and _alive(pm):
            continue
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


def _postmaster_pid(data):
    try:
        with open(os.path.join(data, "postmaster.pid")) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


# A pristine initdb result, copied for every cluster of this process (cp -a is ~10x faster
# than initdb). Keyed by (bindir, locale, server user).
_TEMPLATES = {}


def _template(bin_dir, locale, user):
    key = (bin_dir, locale, user[1] if user else None)
    t = _TEMPLATES.get(key)
    if t and os.path.isfile(os.path.join(t, "data", "PG_VERSION")):
        return os.path.join(t, "data")
    base = tempfile.mkdtemp(prefix=DIR_PREFIX + "template-", dir="/tmp")
    with open(os.path.join(base, "owner"), "w") as f:
        f.write(_owner_tag())
    os.chmod(base, 0o755)
    data = os.path.join(base, "data")
    os.mkdir(data, 0o700)
    if user:
        os.chown(data, user[1], user[2])
    args = [os.path.join(bin_dir, "initdb"), "-D", data, "--auth=trust", "-U", "postgres", "-E", "UTF8",
            "--locale=" + locale, "--no-sync"]
    p = _run_as(user, args, cwd=data)
    if p.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise PgError("initdb failed (exit %d):\n%s%s" % (p.returncode, p.stdout, p.stderr))
    _TEMPLATES[key] = base
    return data


def _remove_templates():
    for base in _TEMPLATES.values():
        shutil.rmtree(base, ignore_errors=True)
    _TEMPLATES.clear()


atexit.register(_remove_templates)


def _run_as(user, args, cwd, timeout=120):
    kw = {}
    if user:
        kw = {"user": user[1], "group": user[2], "extra_groups": []}
    return subprocess.run(args, cwd=cwd, env=_client_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, **kw)


# --------------------------------------------------------------------------------------------
# The cluster


class PgCluster:
    """One private cluster: data in <base>/data, unix socket in <base>/run, TCP on
    127.0.0.1:<port>. Role and database "omnigate" (the role owns the database; it is a
    superuser only with superuser=True). The bootstrap superuser is "postgres".

    fast=True (the tests) turns off fsync and full_page_writes: they only matter when the
    OS or the machine crashes, which no test simulates. synchronous_commit stays ON even
    then: with it off, a COMMIT is acknowledged before its WAL leaves PostgreSQL's memory,
    so kill() would lose acknowledged transactions and crash tests would blame the gateway.
    Pass settings={"synchronous_commit": "off"} if a test wants that anyway.
    fast=False (the benchmarks): fsync, full_page_writes and synchronous_commit all on.
    """

    def __init__(self, base_dir=None, fast=True, port=None, settings=None, superuser=False, tcp=True):
        self.bindir = bindir()
        self.fast = fast
        self.superuser = superuser
        self.tcp = tcp
        self.extra_settings = dict(settings or {})
        self._user = server_user()
        self._owns_base = base_dir is None
        if base_dir is None:
            sweep_stale()
            base_dir = tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp")
            with open(os.path.join(base_dir, "owner"), "w") as f:
                f.write(_owner_tag())
        else:
            os.makedirs(base_dir, exist_ok=True)
        self.base_dir = os.path.abspath(base_dir)
        self.data_dir = os.path.join(self.base_dir, "data")
        self._socket_dir = os.path.join(self.base_dir, "run")
        self._own_socket_base = None
        if len(self._socket_dir) > SOCKET_PATH_MAX - 15:
            self._own_socket_base = tempfile.mkdtemp(prefix=DIR_PREFIX + "sock-", dir="/tmp")
            self._socket_dir = os.path.join(self._own_socket_base, "run")
        self.log_path = os.path.join(self.data_dir, "postgres.log")
        self._port = port or free_port()
        self._port_fixed = port is not None
        self._proc = None
        self._log = None
        self._initialized = os.path.isfile(os.path.join(self.data_dir, "PG_VERSION"))
        self._bootstrapped = False
        self._started_once = False
        self._leftover = []  # pids of a killed server that must be gone before a restart
        self._closed = False
        atexit.register(self.cleanup)

    # ---- properties ---------------------------------------------------------------------

    @property
    def port(self):
        return self._port

    @property
    def socket_dir(self):
        return self._socket_dir

    @property
    def url(self):
        """libpq URI over the private unix socket (works for psql, pg_dump and the gateway)."""
        return self.url_for(DATABASE)

    @property
    def tcp_url(self):
        """libpq URI over TCP on 127.0.0.1 (for tools or processes that cannot reach the socket)."""
        return self.url_for(DATABASE, tcp=True)

    @property
    def pid(self):
        """The postmaster's pid, or None when it is not running."""
        return self._proc.pid if self.running else None

    @property
    def running(self):
        return self._proc is not None and self._proc.poll() is None

    def url_for(self, db, user=ROLE, tcp=False):
        """libpq URI for database `db` as `user`, over the unix socket unless tcp=True."""
        if tcp:
            if not self.tcp:
                raise PgError("this cluster does not listen on TCP")
            return "postgresql://%s@127.0.0.1:%d/%s" % (urllib.parse.quote(user, safe=""), self._port,
                                                       urllib.parse.quote(db, safe=""))
        return "postgresql://%s@/%s?host=%s&port=%d" % (urllib.parse.quote(user, safe=""),
                                                       urllib.parse.quote(db, safe=""),
                                                       urllib.parse.quote(self._socket_dir, safe="/"), self._port)

    dsn = url_for

    # ---- lifecycle ----------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def start(self):
        """Starts the server (initdb first if needed) and waits until it accepts connections.
        A no-op when running. After stop() or kill(): same data dir, same port, same socket."""
        if self._closed:
            raise PgError("cluster %s was cleaned up" % self.base_dir)
        if self.running:
            return self
        if not self._initialized:
            self._initdb()
        self._wait_leftovers()
        self._remove_stale_locks()
        for attempt in range(5):
            self._write_conf()
            err = self._spawn_and_wait()
            if err is None:
                break
            port_taken = ("could not bind" in err or "Address already in use" in err
                          or "could not create any TCP/IP sockets" in err or "could not create lock file" in err)
            if port_taken and not self._started_once and not self._port_fixed and attempt < 4:
                self._port = free_port()  # lost a race for the port with another process
                continue
            raise PgError("postgres did not start (port %d, data %s):\n%s" % (self._port, self.data_dir, err))
        self._started_once = True
        if not self._bootstrapped:
            self._bootstrap()
        return self

    def stop(self, mode="fast", timeout=STOP_TIMEOUT):
        """Shuts the server down (smart, fast or immediate) and waits for its exit. Idempotent."""
        if mode not in _STOP_SIGNALS:
            raise ValueError("mode must be smart, fast or immediate")
        if self._proc is None:
            return
        if self._proc.poll() is None:
            children = _children(self._proc.pid)
            try:
                self._proc.send_signal(_STOP_SIGNALS[mode])
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_now(children + _children(self._proc.pid))
            self._leftover = [p for p in children if _alive(p)]
        self._proc = None
        self._close_log()

    def replica(self, settings=None):
        """A new cluster that is a hot standby of this one (which must be running): a base backup
        taken with `pg_basebackup -R -X stream` (so it streams from this cluster with PostgreSQL's
        own replication, primary_conninfo pointing at this cluster's socket), on its own
        directory, port and socket, started. Same roles and databases; read-only. Use it as a
        context manager or call cleanup(). stop()/start() work as on any cluster; it catches up
        on its own after a restart (within the WAL this cluster keeps)."""
        if not self.running:
            raise PgError("the primary must run to take a base backup")
        r = PgCluster(fast=self.fast, settings=settings, tcp=self.tcp)
        r._basebackup(self)
        return r.start()

    def _basebackup(self, primary):
        if self._user:
            os.chmod(self.base_dir, 0o755)
            if self._own_socket_base:
                os.chmod(self._own_socket_base, 0o755)
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        self._chown(self.data_dir)
        args = [os.path.join(self.bindir, "pg_basebackup"), "-D", self.data_dir, "-R", "-X", "stream",
                "-c", "fast", "--no-sync", "-d", primary.url_for("postgres", user="postgres")]
        p = _run_as(self._user, args, cwd=self.data_dir)
        if p.returncode != 0:
            raise PgError("pg_basebackup failed (exit %d):\n%s%s" % (p.returncode, p.stdout, p.stderr))
        # The primary's server log came along with its data directory: start this one's afresh.
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        os.makedirs(self._socket_dir, mode=0o755, exist_ok=True)
        self._chown(self._socket_dir)
        self._initialized = True
        self._bootstrapped = True  # the roles and databases are the primary's

    def replay_lsn(self):
        """The WAL position this standby has replayed up to (pg_lsn text), or None if it is not
        a standby."""
        return self.scalar("SELECT pg_last_wal_replay_lsn()", db="postgres", user="postgres") or None

    def wait_replayed(self, primary, timeout=30.0):
        """Waits until this standby has replayed everything `primary` had written when called.
        Returns the seconds it took; raises PgError after `timeout`."""
        target = primary.scalar("SELECT pg_current_wal_lsn()", db="postgres", user="postgres")
        t0 = time.monotonic()
        while True:
            if self.scalar("SELECT pg_last_wal_replay_lsn() >= '%s'::pg_lsn" % target, db="postgres",
                           user="postgres") == "t":
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise PgError("standby %s did not replay up to %s within %.0f s" % (self.base_dir, target, timeout))
            time.sleep(0.02)

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def kill(self, children=True):
        """SIGKILL: a crash. With children=True (default) every server process dies at once,
        like an OOM kill of the container or a host crash; with children=False only the
        postmaster does (its backends notice and exit on their own). Either way the next
        start() runs crash recovery from the WAL."""
        if not self.running:
            return
        kids = _children(self._proc.pid)
        self._kill_now(kids if children else [])
        self._leftover = [p for p in kids if _alive(p)]
        self._proc = None
        self._close_log()

    def cleanup(self):
        """Stops the server (killing it if it does not stop) and removes its directories."""
        if self._closed:
            return
        try:
            self.stop("fast", timeout=15)
        except Exception:
            pass
        if self.running:
            self.kill()
        self._close_log()
        if self._owns_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._own_socket_base:
            shutil.rmtree(self._own_socket_base, ignore_errors=True)
        self._closed = True
        try:
            atexit.unregister(self.cleanup)
        except Exception:
            pass

    close = destroy = cleanup

    # ---- SQL ----------------------------------------------------------------------------

    def psql(self, sql, db=DATABASE, user=ROLE, timeout=60):
        """Runs `sql` (any number of statements, each in its own transaction unless the script
        says BEGIN; psql meta-commands allowed) with psql -XAtq and ON_ERROR_STOP=1. Returns
        stdout; raises PgError with stderr on any error."""
        p = self._client(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", self.url_for(db, user), "-f", "-"],
                         sql, timeout)
        return p.stdout

    def query(self, sql, db=DATABASE, user=ROLE, null=None, timeout=60):
        """Rows of `sql` as tuples of strings (NULL becomes `null`). psql's CSV output is parsed,
        so values holding '|', tabs, newlines, quotes or commas come back intact."""
        marker = "\x01NULL\x02%s\x01" % uuid.uuid4().hex[:8]
        p = self._client(["psql", "-Xtq", "--csv", "-P", "null=" + marker, "-v", "ON_ERROR_STOP=1",
                          "-d", self.url_for(db, user), "-f", "-"], sql, timeout)
        rows = []
        for rec in csv.reader(io.StringIO(p.stdout, newline="")):
            if rec:
                rows.append(tuple(null if v == marker else v for v in rec))
        return rows

    def scalar(self, sql, db=DATABASE, user=ROLE):
        """The single value of a one-row, one-column query."""
        rows = self.query(sql, db=db, user=user)
        assert len(rows) == 1 and len(rows[0]) == 1, "expected one value, got %r" % (rows,)
        return rows[0][0]

    def pg_dump(self, db=DATABASE, args=(), user=ROLE, timeout=120):
        """Plain-SQL dump of `db` (schema and data)."""
        p = self._client(["pg_dump", "-d", self.url_for(db, user)] + list(args), None, timeout)
        return p.stdout

    def create_database(self, name, owner=ROLE):
        """Creates an empty database owned by `owner`; returns its URI."""
        self.psql("CREATE DATABASE %s OWNER %s" % (quote_ident(name), quote_ident(owner)), db="postgres",
                  user="postgres")
        return self.url_for(name)

    def drop_database(self, name):
        """Drops `name` if it exists, disconnecting its sessions (WITH (FORCE))."""
        self.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % quote_ident(name), db="postgres", user="postgres")

    def log_tail(self, n=50):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    # ---- internals ----------------------------------------------------------------------

    def _client(self, args, stdin, timeout):
        args = [os.path.join(self.bindir, args[0])] + args[1:]
        # Bytes, decoded here: text mode would translate "\r\n" inside values to "\n".
        try:
            p = subprocess.run(args, input=(stdin or "").encode("utf-8"), capture_output=True, timeout=timeout,
                               env=_client_env())
        except subprocess.TimeoutExpired as e:
            raise PgError("%s timed out after %s s" % (os.path.basename(args[0]), timeout)) from e
        p.stdout = p.stdout.decode("utf-8", "replace")
        p.stderr = p.stderr.decode("utf-8", "replace")
        if p.returncode != 0:
            raise PgError("%s failed (exit %d): %s" % (os.path.basename(args[0]), p.returncode, p.stderr.strip()))
        return p

    def _chown(self, path):
        if self._user:
            os.chown(path, self._user[1], self._user[2])

    def _initdb(self):
        if self._user:
            os.chmod(self.base_dir, 0o755)
            if self._own_socket_base:
                os.chmod(self._own_socket_base, 0o755)
            if not _reachable(self.base_dir, self._user[1], self._user[2]):
                raise PgError("user %s cannot reach %s (a parent directory is private); use base_dir=None "
                              "or a directory under /tmp" % (self._user[0], self.base_dir))
        if os.path.exists(self.data_dir):
            if os.listdir(self.data_dir):
                raise PgError("%s exists and holds no cluster" % self.data_dir)
            os.rmdir(self.data_dir)
        tmpl = _template(self.bindir, _locale(), self._user)
        p = subprocess.run(["cp", "-a", tmpl, self.data_dir], capture_output=True, text=True)
        if p.returncode != 0:
            raise PgError("copying the initdb template failed: %s" % p.stderr)
        os.makedirs(self._socket_dir, mode=0o755, exist_ok=True)
        self._chown(self._socket_dir)
        with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as f:
            f.write("\n# Settings of the omnigate test harness (rewritten at every start):\n"
                    "include_if_exists = 'omnigate.conf'\n")
        self._initialized = True

    def settings(self):
        s = {
            "listen_addresses": "127.0.0.1" if self.tcp else "",
            "port": self._port,
            "unix_socket_directories": self._socket_dir,
            "max_connections": 200,
            "shared_buffers": "128MB",
            "fsync": not self.fast,
            "full_page_writes": not self.fast,
            "synchronous_commit": "on",
            "log_min_messages": "warning",
            "log_destination": "stderr",
            "logging_collector": False,
            "log_line_prefix": "%m [%p] ",
            "timezone": "UTC",
            "log_timezone": "UTC",
        }
        s.update(self.extra_settings)
        return s

    def _write_conf(self):
        path = os.path.join(self.data_dir, "omnigate.conf")
        with open(path, "w") as f:
            for k, v in self.settings().items():
                f.write("%s = %s\n" % (k, _conf_value(v)))
        self._chown(path)

    def _open_log(self):
        self._close_log()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self._user:
            os.fchown(fd, self._user[1], self._user[2])
        self._log = os.fdopen(fd, "ab", buffering=0)
        self._log_offset = os.fstat(fd).st_size

    def _close_log(self):
        if self._log is not None:
            try:
                self._log.close()
            except OSError:
                pass
            self._log = None

    def _log_since_start(self):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _spawn_and_wait(self):
        """Starts the postmaster; None when it is ready, else the reason (log excerpt)."""
        self._open_log()
        kw = {}
        if self._user:
            kw = {"user": self._user[1], "group": self._user[2], "extra_groups": []}
        self._proc = subprocess.Popen([os.path.join(self.bindir, "postgres"), "-D", self.data_dir],
                                      cwd=self.data_dir, env=_client_env(), stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=self._log, start_new_session=True,
                                      preexec_fn=_set_pdeathsig, **kw)
        deadline = time.monotonic() + START_TIMEOUT
        pidfile = os.path.join(self.data_dir, "postmaster.pid")
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                self._proc = None
                self._close_log()
                return "exit code %d; log:\n%s" % (rc, self._log_since_start())
            try:
                with open(pidfile) as f:
                    lines = f.read().split("\n")
                # A hot standby says "standby" once it accepts read-only connections.
                if (len(lines) > 7 and lines[0].strip() == str(self._proc.pid)
                        and lines[7].strip() in ("ready", "standby")):
                    return None
            except OSError:
                pass
            time.sleep(0.02)
        self._kill_now(_children(self._proc.pid))
        self._proc = None
        self._close_log()
        return "not ready within %.0f s; log:\n%s" % (START_TIMEOUT, self._log_since_start())

    def _bootstrap(self):
        sql = ("SELECT 'CREATE ROLE %(r)s LOGIN%(su)s' WHERE NOT EXISTS "
               "(SELECT FROM pg_roles WHERE rolname = '%(r)s') \\gexec\n"
               "SELECT 'CREATE DATABASE %(d)s OWNER %(r)s' WHERE NOT EXISTS "
               "(SELECT FROM pg_database WHERE datname = '%(d)s') \\gexec\n"
               % {"r": ROLE, "d": DATABASE, "su": " SUPERUSER" if self.superuser else ""})
        self.psql(sql, db="postgres", user="postgres")
        self._bootstrapped = True

    def _kill_now(self, children):
        """SIGKILLs the postmaster and `children`, reaps the postmaster, waits for the rest."""
        for pid in [self._proc.pid] + list(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self._proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in children):
            time.sleep(0.02)

    def _wait_leftovers(self):
        """Processes of a killed server still attached to its shared memory block would make
        the new postmaster refuse to start: wait for them (they exit on postmaster death)."""
        deadline = time.monotonic() + 15
        while self._leftover and time.monotonic() < deadline:
            self._leftover = [p for p in self._leftover if _alive(p)]
            if self._leftover:
                time.sleep(0.02)
        for p in self._leftover:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._leftover = []

    def _remove_stale_locks(self):
        """postmaster.pid and the socket lock files of a dead server. PostgreSQL removes them
        itself when their pid is gone, but an unreaped zombie (or a reused pid) would make it
        believe another postmaster still runs."""
        locks = [os.path.join(self.data_dir, "postmaster.pid")]
        locks += glob.glob(os.path.join(self._socket_dir, ".s.PGSQL.*.lock"))
        for lock in locks:
            try:
                with open(lock) as f:
                    pid = int(f.readline().strip())
            except (OSError, ValueError):
                continue
            if not _alive(pid) or pid == os.getpid():
                try:
                    os.unlink(lock)
                except OSError as e:
                    if e.errno != errno.ENOENT:
                        raise
                if lock.endswith(".lock"):
                    try:
                        os.unlink(lock[:-len(".lock")])  # the socket itself
                    except OSError:
                        pass
            else:
                raise PgError("%s: process %d still runs a server here" % (lock, pid))

    def __repr__(self):
        return "<PgCluster %s port=%d %s>" % (self.base_dir, self._port, "running" if self.running else "stopped")


@contextlib.contextmanager
def temp_database(cluster, prefix="t_"):
    """A uniquely named empty database in `cluster` for the duration of the block; yields
    its URI and drops it afterwards WITH (FORCE), even when sessions are still open."""
    name = prefix + uuid.uuid4().hex[:16]
    url = cluster.create_database(name)
    try:
        yield url
    finally:
        cluster.drop_database(name)


# --------------------------------------------------------------------------------------------
# Pytest fixtures (conftest.py imports them)

if pytest is not None:

    @pytest.fixture(scope="session")
    def pg_session():
        """One cluster for the whole session (fast settings). Do not stop or kill it: use
        pg_private for that. Use fresh_db for an isolated database in it."""
        with PgCluster(fast=True) as c:
            yield c

    @pytest.fixture
    def pg_private():
        """A cluster of this test alone: stop(), start(), restart() and kill() are fine."""
        with PgCluster(fast=True) as c:
            yield c

    @pytest.fixture
    def pg_replica(pg_private):
        """A hot standby of pg_private (pg_basebackup -R), started; stop() and start() are fine."""
        with pg_private.replica() as r:
            yield r

    @pytest.fixture
    def fresh_db(pg_session):
        """URI of a new, empty database in the session cluster owned by role omnigate;
        dropped (WITH (FORCE)) after the test."""
        with temp_database(pg_session) as url:
            yield url

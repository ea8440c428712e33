"""Interim throwaway PostgreSQL cluster for the e2e tests (replaced by pgcluster.py)."""

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest


def _bindir():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    return dirs[-1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="og-pg-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.data = os.path.join(self.base, "data")
        self.port = _free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
        self._run(["initdb", "-D", self.data, "--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C",
                   "--no-sync"])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("listen_addresses='127.0.0.1'\nport=%d\nunix_socket_directories='%s'\nfsync=off\n"
                    "synchronous_commit=off\nfull_page_writes=off\nmax_connections=300\n" % (self.port, self.base))
        self.running = False
        self.start()
        self.psql("CREATE ROLE omnigate LOGIN SUPERUSER", db="postgres", user="postgres")
        self.psql("CREATE DATABASE omnigate OWNER omnigate", db="postgres", user="postgres")
        atexit.register(self.destroy)

    def _run(self, args):
        subprocess.run(self.as_user + [os.path.join(_bindir(), args[0])] + args[1:], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/tmp")

    def url_for(self, db):
        return "postgresql://omnigate@127.0.0.1:%d/%s" % (self.port, db)

    @property
    def url(self):
        return self.url_for("omnigate")

    def psql(self, sql, db="omnigate", user="omnigate"):
        p = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.port),
                            "-U", user, "-d", db, "-c", sql], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(p.stderr)
        return p.stdout

    def start(self):
        self._run(["pg_ctl", "-D", self.data, "-l", os.path.join(self.base, "log"), "-w", "-t", "30", "start"])
        self.running = True

    def stop(self):
        if self.running:
            self._run(["pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])
            self.running = False

    def destroy(self):
        try:
            self.stop()
        except Exception:
            pass
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_session():
    c = PgCluster()
    yield c
    c.destroy()


@pytest.fixture
def pg_private():
    c = PgCluster()
    yield c
    c.destroy()


@pytest.fixture
def fresh_db(pg_session):
    name = "t_" + uuid.uuid4().hex[:12]
    pg_session.psql("CREATE DATABASE %s" % name)
    yield pg_session.url_for(name)
    pg_session.psql("DROP DATABASE %s WITH (FORCE)" % name)

"""A throwaway PostgreSQL cluster for running the store tests outside scripts/test.

scripts/test starts one itself (scripts/_bootstrap.sh, albedo_postgres) and passes
$ALBEDO_TEST_POSTGRES_URL; this is the fallback when pytest is run directly.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile


def find_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) if x.isdigit() else 0 for x in p.split("/")[4].split(".")])
    return found[-1] if found else None


class Cluster:
    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="albedo-pg-")
        self.run: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(self.dir, "postgres", "postgres")
            runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin") or "runuser"
            self.run = [runuser, "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://albedo@127.0.0.1:{self.port}/postgres"

    def _do(self, *args: str, check: bool = True) -> None:
        done = subprocess.run(self.run + list(args), capture_output=True, text=True, timeout=120)
        if check and done.returncode:
            raise RuntimeError(f"{os.path.basename(args[0])} failed: {done.stdout}{done.stderr}")

    def start(self) -> str:
        data = os.path.join(self.dir, "data")
        self._do(os.path.join(self.bindir, "initdb"), "-D", data, "-U", "albedo", "-A", "trust", "-E", "UTF8")
        # pg_ctl daemonises postgres: with pytest as subreaper it is a descendant of
        # pytest, started before any test's leak snapshot and stopped at session end.
        self._do(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"), "-w",
                 "-t", "60", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c autovacuum=off",
                 "start")
        return self.url

    def stop(self) -> None:
        try:
            self._do(os.path.join(self.bindir, "pg_ctl"), "-D", os.path.join(self.dir, "data"),
                     "-m", "immediate", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

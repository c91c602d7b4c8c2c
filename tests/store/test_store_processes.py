"""The store shared by processes: interleaved writers lose nothing, a killed writer tears nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store_worker.py")

N_UPDATES = 200


class Worker:
    """One store_worker.py process; always waited for (or killed) by the test."""

    def __init__(self, backend, mode: str, *args: str, wait: bool = True) -> None:
        _kind, home, url = backend
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, mode, home, url or "-", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            out, err = self.proc.communicate(timeout=10)
            pytest.fail(f"worker did not start: {line}{out}{err}")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 120) -> list[str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate(timeout=10)
            raise
        assert self.proc.returncode == 0, err
        return out.split()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)


def test_two_processes_interleaving_updates_lose_nothing(backend, stores):
    store = stores()  # creates and migrates before the workers race
    a = Worker(backend, "updates", "a", str(N_UPDATES), "shared", "own-a")
    b = Worker(backend, "updates", "b", str(N_UPDATES), "shared", "own-b")
    a.go()
    b.go()
    assert a.finish()[-1] == "done"
    assert b.finish()[-1] == "done"
    shared = store.get_credentials("shared").env
    assert len(shared) == 2 * N_UPDATES
    assert set(shared) == {f"{t}_{i}" for t in "ab" for i in range(N_UPDATES)}
    for tag in "ab":
        assert dict(store.get_credentials(f"own-{tag}").env) == {f"{tag}_{i}": str(i) for i in range(N_UPDATES)}


def test_a_process_killed_mid_write_leaves_old_or_new_never_torn(backend, stores):
    store = stores()
    worker = Worker(backend, "torn", "victim")
    worker.go()
    try:
        # Let it write for a while (it reports every 10 records), then kill it mid-flight.
        for _ in range(8):
            line = worker.proc.stdout.readline()
            assert line, worker.proc.stderr.read()
    finally:
        worker.proc.send_signal(signal.SIGKILL)
        worker.kill()
    creds = store.get_credentials("victim")
    seq = int(creds.env["SEQ"])
    assert seq >= 80
    assert creds.bearer_token == f"tok-{seq}"
    assert creds.header == ("X-Seq", str(seq))
    assert creds.env["PAD"] == "x" * (seq % 50)
    assert creds.oauth["seq"] == seq and list(creds.oauth["tokens"]) == [seq] * (seq % 7)
    saved = store.load_catalogue("victim")
    n = saved.catalogue["seq"]
    assert n in (seq - 1, seq)  # record i's catalogue is written after its credentials
    assert (saved.fingerprint, saved.era) == (f"fp-{n}", f"era-{n}")
    assert [t["name"] for t in saved.catalogue["tools"]] == [f"t{n}-{k}" for k in range(n % 40)]
    if backend[0] == "sqlite":
        assert store._db.execute_sql("PRAGMA integrity_check").fetchone()[0] == "ok"
    # The store still takes writes.
    store.update_credentials("victim", lambda c: c)


def test_two_processes_opening_a_new_store_migrate_once(backend, stores):
    # Both open (and so migrate) at once, before "ready"; each prints what it applied.
    workers = [Worker(backend, "open", wait=False) for _ in range(3)]
    for w in workers:
        w.wait_ready()
    for w in workers:
        w.go()
    outputs = sorted(w.finish() for w in workers)
    assert outputs == [["1,2,3,4,5,6", "done"], ["done"], ["done"]]
    store = stores()
    assert store.migrations_applied == ()
    assert store.schema_versions() == [1, 2, 3, 4, 5, 6]


def test_a_store_opened_by_two_processes_shares_data(backend, stores):
    store = stores()
    writer = Worker(backend, "put", "docs", "from-writer")
    writer.go()
    assert writer.finish() == ["done"]
    assert store.get_credentials("docs").bearer_token == "from-writer"
    assert store.load_catalogue("docs").catalogue == {"tools": [{"name": "from-writer"}]}
    from albedo_actors.store import Credentials

    store.put_credentials("docs", Credentials(bearer_token="from-test"))
    reader = Worker(backend, "get", "docs")
    reader.go()
    assert reader.finish() == ["from-test", "done"]

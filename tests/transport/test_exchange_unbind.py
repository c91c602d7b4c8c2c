"""An HTTP exchange handed from the caller's thread to a worker (an SSE answer, a sign-in
round) is bounded by the caller's wait alone from then on: its socket's reads no longer
time out at the deadline the caller had when it posted. Before, a stream whose server
sent its last progress and then nothing could end as "the connection broke
(TimeoutError) ... may or may not have run" when that stale socket timeout fired just
before the caller's moved deadline (the suite saw it once under load), instead of the
caller's "timed out" (tests/test_progress.py)."""

from __future__ import annotations

import socket

from albedo_actors.transport.http import Exchange
from albedo_actors.wire.deadline import Deadline


def test_unbind_drops_the_deadline_and_the_sockets_timeout_from_it():
    ours, theirs = socket.socketpair()
    try:
        exchange = Exchange(Deadline.after(5))
        exchange.attach(ours)
        exchange.bound_read()
        assert 0 < ours.gettimeout() <= 5
        exchange.unbind()
        assert exchange.deadline is None and exchange.remaining() is None
        assert ours.gettimeout() is None  # reads wait for data, or for the caller's abort
        exchange.abort()  # what the caller's timeout does: the worker's read returns at once
        assert ours.recv(1) == b""
    finally:
        ours.close()
        theirs.close()


def test_unbind_keeps_a_reads_own_bound():
    ours, theirs = socket.socketpair()
    try:
        exchange = Exchange(Deadline.after(5))
        exchange.idle_timeout = 30.0  # as send(read_timeout=30) records it
        exchange.attach(ours)
        ours.settimeout(1.0)  # what send set from the deadline
        exchange.unbind()
        assert ours.gettimeout() == 30.0
    finally:
        ours.close()
        theirs.close()

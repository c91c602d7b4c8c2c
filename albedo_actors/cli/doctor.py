"""``doctor``: dial every enabled server now, in parallel, and say how each one is.

The check is :mod:`albedo_actors.settings.doctor`'s :func:`~albedo_actors.settings.doctor.examine`
(one :class:`~albedo_actors.settings.doctor.Report` per server; the settings service runs
the same one); :func:`doctor_command` prints them (or ``--json``, one array) and exits 0
only when every server it checked is ``ok``. No secret is ever printed: every line is
redacted by the check, and each is printed as one printable line.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

from ..config import McpConfig, load, resolve_home
from ..errors import EXIT_OK, EXIT_UNAVAILABLE
from ..settings.doctor import STATES, Report, examine, redact, secret_values  # noqa: F401 - the command's names
from ..transport.stdio import TAIL_JOIN
from ..wire.text import printable
from .admin import auth_text
from .options import PROG, Usage
from .output import note, out, print_json

# -- the command --------------------------------------------------------------------------------


def doctor_parser(commands: Any, place_options: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="dial every enabled server now, in parallel, and say how each one is",
        description="Dial every enabled server now (all at once, each within its startupTimeoutMs) and report "
                    "its state (ok, down, needs_sign_in, misconfigured, off), era and version, tools, time to "
                    "ready, auth and saved catalogue; save what was discovered. Exit 0 when every server checked "
                    "is ok, else 3.")
    doctor.add_argument("names", nargs="*", metavar="NAME", help="check only these servers (default: every one)")
    doctor.add_argument("--json", action="store_true", help="print a JSON array, one object per server")
    place_options(doctor)


def doctor_command(args: argparse.Namespace) -> int:
    from ..store import open_store

    if getattr(args, "no_store", False):
        raise Usage("doctor keeps what it finds in the store; leave out --no-store")
    config = load(resolve_home(args.home))
    store = open_store(config.home, url=args.database)
    waiting = _waiting_line(config, args.names)
    try:
        reports = examine(config, store, args.names)
    finally:
        store.close()
        if waiting:
            sys.stderr.write("\r\x1b[K")  # the waiting line goes; the reports follow
            sys.stderr.flush()
    if args.json:
        print_json([report.as_json() for report in reports])
    elif not reports:
        # On stderr, as ``servers`` says it: stdout holds only the reports.
        note(f"no servers yet; add one: {PROG} add URL | 'COMMAND LINE'")
    else:
        for report in reports:
            for line in report_lines(report):
                out(line)
        out(summary(reports))
    checked = [report for report in reports if report.enabled or args.names]  # a server named is checked, off or not
    return EXIT_OK if all(report.state == "ok" for report in checked) else EXIT_UNAVAILABLE


def _waiting_line(config: McpConfig, names: Sequence[str]) -> bool:
    """On a terminal, say what is being waited for (a hung server takes its whole
    startupTimeoutMs, 30 s by default); True if a line was written."""
    if sys.stderr is None or not sys.stderr.isatty():
        return False
    chosen = set(names)
    servers = [s for s in config.servers if (s.name in chosen if chosen else s.enabled)]
    if not servers:
        return False
    longest = max(s.startup_timeout for s in servers)
    sys.stderr.write(f"checking {len(servers)} server{'s' if len(servers) != 1 else ''}, "
                     f"each within its startupTimeoutMs (at most {longest:g} s)...")
    sys.stderr.flush()
    return True


def report_lines(report: Report) -> list[str]:
    """A report as text: a head line, then indented detail lines."""
    head = f"{report.name}: {report.state} ({report.transport}"
    if report.state == "ok":
        counts = ", ".join(_count(n, what) for n, what in
                           ((report.tools, "tool"), (report.resources, "resource"), (report.prompts, "prompt")))
        head += f", {report.era} {report.protocol_version}, {counts}; ready in {report.ready_ms} ms"
    lines = [head + ")"]
    if report.error:
        lines.append(f"  error: {report.error}")
    if report.stderr:
        lines.append(f"  stderr: {TAIL_JOIN.join(report.stderr)}")
    if report.transport == "http":  # a stdio server has no auth of ours
        lines.append("  " + auth_text(report.auth))
    lines.append("  catalogue: " + catalogue_text(report))
    return [printable_line(line) for line in lines]


def catalogue_text(report: Report) -> str:
    when = f"saved {_utc(report.catalogue_saved_at)}" if report.catalogue_saved_at is not None else ""
    text = {
        "current": f"current ({when})" if when else "current",
        "changed": f"changed since it was {when}" if when else "changed",
        "outdated": f"outdated: {when} under another configuration" if when else "outdated",
        "none": "none saved",
    }[report.catalogue]
    if report.catalogue_updated:
        text += "; the one discovered now is saved"
    return text


def summary(reports: Sequence[Report]) -> str:
    counts = {state: sum(1 for r in reports if r.state == state) for state in STATES}
    parts = [f"{n} {state}" for state, n in counts.items() if n]
    return f"{len(reports)} server{'s' if len(reports) != 1 else ''}: " + ", ".join(parts)


def printable_line(line: str) -> str:
    """One line, whatever a server put in it (its stderr, its error text)."""
    return printable(line, one_line=True)


def _count(n: int | None, what: str) -> str:
    n = n or 0
    return f"{n} {what}{'' if n == 1 else 's'}"


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))

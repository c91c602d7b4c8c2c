"""``serve`` (a host with the settings service) and ``open`` (a new single-use link to its page)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..config import resolve_home
from ..errors import EXIT_OK, ConfigError, SessionTimedOut
from .options import PROG, Usage, place_options
from .output import out


def serve_parsers(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run a host (a runtime and its session) with the settings service on 127.0.0.1",
                                description="Run a host with the settings service: the one writer of the home while it runs. "
                                            "Prints the browser URL; SIGTERM or Ctrl-C stops it.")
    place_options(serve)
    serve.add_argument("--port", type=int, default=0, metavar="N", help="the port on 127.0.0.1 (default 0: an ephemeral one)")
    page = commands.add_parser("open", help="open the settings page of the running service (a new single-use link)",
                               description="Ask the running settings service for a new link to its page, print it, and open "
                                           "it in the browser (unless --no-browser or ALBEDO_NO_BROWSER). The link works once.")
    place_options(page)
    page.add_argument("--no-browser", action="store_true", help="only print the link")


def serve_command(args: argparse.Namespace) -> int:
    """``serve``: a :class:`~albedo_actors.service.host.Host` (a Runtime over the home's store,
    and the Service beside it) until SIGTERM or SIGINT.

    A save through the service (and a sign-in that ended) tells the session to reload
    once, between turns. Stopping ends the service (service.json removed), then the
    runtime (every server process ends), then the store.
    """
    import signal
    import threading

    from ..service.host import Host
    from ..store import open_store

    home = resolve_home(args.home)
    if not 0 <= args.port <= 65535:
        raise Usage(f"--port must be from 0 to 65535, not {args.port}")
    stopping = threading.Event()
    handlers = {sig: signal.signal(sig, lambda signum, frame: stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    store = open_store(home, url=args.database)
    try:
        with Host(home, store, port=args.port) as host:
            out(f"albedo-mcp: settings service for {home}: open {host.service.open_url()} "
                f"(that link works once; `{PROG} open` gives another; SIGTERM or Ctrl-C stops the service)",
                flush=True)
            while not stopping.wait(0.5):
                pass
    finally:
        store.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return EXIT_OK


def open_command(args: argparse.Namespace) -> int:
    """``open``: a new single-use link to the running service's page, printed and opened."""
    from ..auth.browser import open_local_file
    from ..service.client import ServiceClient, ServiceSilent

    home = resolve_home(args.home)
    try:
        client = ServiceClient.find(home)
    except ServiceSilent as exc:
        raise SessionTimedOut(str(exc).partition("; acting")[0] + "; try again") from None
    if client is None:
        raise ConfigError(f"no settings service runs for {home}; start one with `{PROG} serve`")
    url = client.new_link()
    out(f"Open this link (it works once): {url}", flush=True)
    if not args.no_browser:
        # Never the link on the browser's command line, which every local user can read
        # in /proc: a page of the user's own (0600, in the 0700 home) that forwards to it.
        import html

        from ..safefiles import replace_private
        from ..service.local import PAGE_LINK_FILE

        page = os.path.join(home, PAGE_LINK_FILE)
        target = html.escape(url, quote=True)
        replace_private(page, f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                              f'<meta http-equiv="refresh" content="0;url={target}">'
                              f'<title>albedo-mcp settings</title><a href="{target}">Open the settings page</a>\n')
        open_local_file(page)
    return EXIT_OK

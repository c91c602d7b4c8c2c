"""``sign-in``: directly (a loopback listener) or through the running settings service, with a pasted callback URL taken too."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from ..errors import EXIT_OK, AlbedoError, ConfigError
from .output import error_line, out, warn

if TYPE_CHECKING:
    from ..service.client import ServiceClient
    from ..settings import Settings


def sign_in(settings: Settings, args: argparse.Namespace) -> int:
    """Run a sign-in: print the URL, open the browser, race the listener with a pasted URL."""
    import threading

    from ..auth.browser import NO_BROWSER_ENV

    def announce(url: str) -> None:
        if flow.notice:  # a second URL: the authorization server refused the first client
            out(flow.notice, flush=True)
        show_url(args.name, url)

    environ = {**os.environ, NO_BROWSER_ENV: "1"} if args.no_browser else None
    flow = settings.begin_sign_in(args.name, announce=announce, port=args.port, lifetime=args.timeout, environ=environ,
                                  new_client=args.new_client)
    done = threading.Event()

    reader = threading.Thread(target=read_pasted, args=(done, flow.offer), name="sign-in-paste", daemon=True)
    reader.start()
    try:
        record = flow.run()
    except KeyboardInterrupt:
        flow.cancel()
        forgot = f"; {flow.forgot_registration}" if flow.forgot_registration else ""
        error_line(f"server {args.name!r}: sign-in cancelled{forgot}")
        return 130
    finally:
        done.set()
        reader.join(1.0)
    scope = f" (scope {record.scope})" if record.scope else ""
    out(f"signed in to {args.name}{scope}")
    return EXIT_OK


def show_url(name: str, url: str) -> None:
    """Tell the user where to sign in, and that a pasted callback URL is taken too."""
    out(f"Open this URL to sign in to {name}:\n{url}", flush=True)
    out("Waiting for the browser; or paste the URL it was sent to (the callback) and press Enter.", flush=True)


NOT_THIS_CALLBACK = "That URL is not this sign-in's callback (wrong or missing state); still waiting."


def read_pasted(done: Any, offer: Callable[[str], bool]) -> None:
    """Offer each line pasted on standard input until ``done`` is set (a sign-in's paste path)."""
    import select

    # Poll standard input so the thread ends with the sign-in (no blocked read left).
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        return
    buffered = b""
    while not done.is_set():
        try:
            ready, _, _ = select.select([fd], [], [], 0.2)
        except (OSError, ValueError):
            return
        if not ready:
            continue
        try:
            chunk = os.read(fd, 8192)
        except OSError:
            return
        if not chunk:
            return  # end of input: only the browser can finish it
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            text = line.decode("utf-8", "replace").strip()
            if text and not offer(text):
                print(NOT_THIS_CALLBACK, file=sys.stderr, flush=True)


def forgotten(status: dict[str, Any]) -> str:
    """What a sign-in the service ran said of the kept registration it forgot ("" if nothing)."""
    from ..auth.signin import FORGOTTEN

    reason = status.get("reason")
    return f"; {FORGOTTEN}" if isinstance(reason, str) and reason.endswith(FORGOTTEN) else ""


def sign_in_through(client: ServiceClient, args: argparse.Namespace) -> int:
    """``sign-in`` through the service: PUT, show (and open) the URL, take a pasted callback
    URL, and poll the sign-in's state until it ends or ``--timeout`` passes."""
    import threading

    from ..auth.browser import open_authorization_url
    from ..service.client import ServiceSignInFailed

    name = args.name
    started = client.sign_in(name, new_client=args.new_client)
    done = threading.Event()

    paster = client.fork()  # the paste thread's own connections

    def offer(text: str) -> bool:
        try:
            paster.offer(name, text)
        except ConfigError:
            return False
        except AlbedoError as exc:  # the service failed or went away: the poll says the rest
            warn(str(exc))
        return True

    reader = threading.Thread(target=read_pasted, args=(done, offer), name="sign-in-paste", daemon=True)
    status = started
    try:
        if started.get("state") == "pending":
            url = started.get("authorizationUrl")
            if not isinstance(url, str) or not url:
                raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the settings service gave no authorization URL")

            def send_to(url: str) -> None:
                show_url(name, url)
                if not args.no_browser:
                    try:
                        open_authorization_url(url)
                    except ValueError as exc:
                        client.cancel_sign_in(name)
                        raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the authorization URL cannot "
                                                        f"be opened: {exc}") from None

            send_to(url)
            reader.start()
            deadline = time.monotonic() + args.timeout
            while True:
                status = client.sign_in_status(name)
                if status.get("state") != "pending":
                    break
                again = status.get("authorizationUrl")
                if isinstance(again, str) and again and again != url:
                    # The service registered a new client after a refusal: a second URL, and a new wait.
                    url = again
                    notice = status.get("notice")
                    if isinstance(notice, str) and notice:
                        out(notice, flush=True)
                    send_to(url)
                    deadline = time.monotonic() + args.timeout
                if time.monotonic() >= deadline:
                    client.cancel_sign_in(name)  # waits (bounded) for it to end: its reason says what it forgot
                    raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the sign-in was not completed in time"
                                                    f"{forgotten(client.sign_in_status(name))}")
                done.wait(min(0.25, max(0.0, deadline - time.monotonic())))  # polls the service; bounded by --timeout
    except KeyboardInterrupt:
        forgot = ""
        with contextlib.suppress(AlbedoError):
            client.cancel_sign_in(name)  # waits (bounded) for it to end: its reason says what it forgot
            forgot = forgotten(client.sign_in_status(name))
        error_line(f"server {name!r}: sign-in cancelled{forgot}")
        return 130
    finally:
        done.set()
        if reader.is_alive():
            reader.join(1.0)
        if not reader.is_alive():
            paster.close()
    state = status.get("state")
    if state != "signed_in":
        reason = status.get("reason")
        line = reason if isinstance(reason, str) and reason else f"server {name!r}: sign-in failed: the sign-in ended ({state})"
        raise ServiceSignInFailed(name, line)
    scope = None
    for view in client.get().get("servers") or []:
        if isinstance(view, dict) and view.get("name") == name and isinstance(view.get("auth"), dict):
            scope = view["auth"].get("scope")
    out(f"signed in to {name}{f' (scope {scope})' if scope else ''}")
    return EXIT_OK

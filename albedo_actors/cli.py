"""``albedo-mcp``: the admin command line (``python -m albedo_actors`` is the same program).

::

    albedo-mcp [--home DIR] [--database URL | --no-store] tools [--json]
    albedo-mcp [--home DIR] [--database URL | --no-store] call NAME [--args JSON] [--json] [--hidden]
    albedo-mcp demo
    albedo-mcp extension [--json] | extension mcp|editor-mcp on|off

    albedo-mcp servers [--json]
    albedo-mcp add TARGET [--transport http|stdio] [--name NAME] [--disabled]
               [--bearer-token | --bearer-token-env VAR]
               [--header NAME [--header-env VAR]] [--env KEY ...] [--env-from KEY=VAR ...]
               [--oauth-client-id ID [--oauth-client-secret | --oauth-client-secret-env VAR]] [--stdin]
    albedo-mcp edit NAME [--url URL | --command LINE] [the secret options of add]
    albedo-mcp remove NAME | enable NAME | disable NAME
    albedo-mcp sign-in NAME [--timeout S] [--port P] [--no-browser] [--new-client] | sign-out NAME
    albedo-mcp store new-key [--file PATH] | status | encrypt | rotate-key [--new-key-file PATH] | decrypt

``sign-in`` signs in to an HTTP server that asks for OAuth: it prints the authorization
URL, opens the browser (unless ``--no-browser`` is given or ``$ALBEDO_NO_BROWSER`` is set), and waits for the
browser's redirect to the loopback listener; a callback URL pasted on standard input
(one line) is taken too, whichever comes first. Ctrl-C cancels it. ``--new-client``
registers a new OAuth client instead of reusing the one kept for the authorization server
(a client the user configured is never replaced). ``sign-out`` forgets the server's
tokens, and its next sign-in registers a new client.

**One writer.** While ``HOME/service.json`` names a live settings service for the home
(``albedo-mcp serve``, or a host embedding :class:`albedo_actors.service.server.Service`),
``add``, ``edit``, ``remove``, ``enable``, ``disable``, ``extension``, ``sign-in`` and
``sign-out`` go through its API (:class:`albedo_actors.service.client.ServiceClient`), so
the host saves the change and its sessions reload; they print the same lines and exit
with the same codes as when they act directly. The secrets they read go in the PATCH
body's ``secrets``, never in argv. ``sign-in`` then starts the service's sign-in (its
loopback listener: ``--port`` is the service's choice), prints and opens the URL, posts a
pasted callback URL to it, and polls its state until it ends or ``--timeout`` passes (then
it cancels it, as Ctrl-C does). A ``service.json`` whose pid is gone is ignored; a service
that refuses the connection (it is stopping) means acting directly, as today; one that
names any address but ``127.0.0.1`` is refused (exit 2) and its token is never sent.
``servers``, ``tools`` and ``call`` only read, and run as always.

``NAME`` is an advertised name as ``tools`` prints it (``mcp_<server>_<operation>_<hash>``,
see :mod:`albedo_actors.catalogue.naming`) or ``SERVER/TOOL``; a ``read_resource`` or ``get_prompt``
name reads a resource (``--args '{"uri": ...}'``) or gets a prompt
(``--args '{"name": ..., "arguments": {...}}'``). ``call`` resolves ``NAME`` as the binding
does (:meth:`albedo_actors.catalogue.composition.Composition.resolve`): a tool kept from the
model because its ``inputSchema`` was left out is called only with ``--hidden``
(without it, one line says why it is not advertised and to add ``--hidden``).

The admin commands (servers, add, edit, remove, enable, disable) take ``--home`` and
``--database URL`` (else ``$ALBEDO_DATABASE_URL``, else SQLite at HOME/albedo.db) and
change settings only through :mod:`albedo_actors.settings`. Secrets are never taken
from the command line: each one named by an option is read without echo from the
terminal, or, when standard input is not a terminal (or ``--stdin`` is given), as one
line of standard input each, in the order bearer token, header value, env entries,
OAuth client secret;
``--bearer-token-env``, ``--header-env``, ``--env-from`` and ``--oauth-client-secret-env``
read them from the script's environment instead, but never from one of albedo's own
variables (``ALBEDO_*``, the store key first: exit 2, one line). For ``edit`` a blank
secret keeps the stored one and ``-`` removes it.

Exit codes: 0 done; 1 the tool reported ``isError`` (or the server answered the call
with a JSON-RPC error); 2 usage or configuration error; 3 unavailable (the call did
not run, e.g. the server needs a sign-in; for add/edit/enable: the server could not connect, so
nothing was saved; for sign-in: the sign-in failed);
4 unknown outcome (the call was sent and the connection was lost, or the answer was
not valid MCP); 5 timed out (the server, or the session, did not answer in time); 6 the
session failed or closed; 7 the store could not be read or written. Each error class has
its code in :data:`albedo_actors.errors.EXIT_CODES`. Warnings go to stderr, one line
each, naming the server.
No traceback reaches the user unless ``--verbose`` is given.

Nothing a server sends reaches the terminal as a control code: every line printed
(lists, results, error lines, warnings, ``--verbose`` logs) goes through
:func:`albedo_actors.wire.text.printable`, which writes C0 controls (but newline and
tab in results; error and warning lines escape those too), DEL, C1 controls, bidi
overrides and lone surrogates as ``repr()`` does (``\\x1b``, ``\\x9b``, ``\\u202e``).
``--json`` output is exact JSON of what the server sent, with those code points as
JSON escapes (:func:`albedo_actors.wire.text.json_text`).

``tools`` and ``call`` run on :class:`albedo_actors.runtime.Runtime` over the store a
host uses (``--database``, else ``$ALBEDO_DATABASE_URL``, else HOME/albedo.db, created
0600 in a 0700 home when missing; ``--no-store`` opens none): a server whose saved
catalogue matches its configuration is listed from it without being started, so a
second ``tools`` is as quick whatever the servers do; ``call`` starts only the servers
its name can mean. Both choose the ``mcp`` extension on for their own session: they are
admin tools and work whatever the configured default says.

``store`` manages the encryption of the secrets at rest (see :mod:`albedo_actors.store.sealing`):
``new-key`` prints a fresh key (or writes it, 0600, to a new ``--file``); ``status``
counts the rows in clear and sealed under each key id; ``encrypt`` seals every row
under ``$ALBEDO_STORE_KEY`` (or ``$ALBEDO_STORE_KEY_FILE``), one row per transaction, so
it may be killed at any moment and run again; ``rotate-key`` re-seals under
``--new-key-file`` (else ``$ALBEDO_STORE_NEW_KEY``, or ``$ALBEDO_STORE_NEW_KEY_FILE``),
opening with the current key; ``decrypt`` writes every row back in clear. A row they
cannot read is left as it is with one warning line, the others are done, and they exit 7.
A server whose stored credentials cannot be read is its own error: ``servers`` lists it
(state ``credentials unreadable``, the store's line in place of its credentials) beside
the others and exits 0, ``tools`` leaves it out with a warning, ``call`` of it exits 7.

``extension`` lists each extension's default for every session (the top-level
``enabled`` object of extensions.json: ``mcp`` off and ``editor-mcp`` on unless set);
``extension mcp on`` (or ``off``; ``editor-mcp`` likewise) changes it through
:mod:`albedo_actors.settings`. A session's own choice still overrides it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import logging
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

import pykka

from . import __version__
from .config import OWN_VARIABLE, McpConfig, load, own_variable, resolve_home
from .errors import (
    EXIT_OK,
    EXIT_STORE,
    EXIT_TOOL_ERROR,
    EXIT_USAGE,
    AlbedoError,
    ConfigError,
    SessionClosed,
    SessionTimedOut,
    StoreError,
    Unavailable,
    exit_code,
)
from .catalogue.naming import Advertised, server_prefix
from .catalogue.composition import perform
from .wire.deadline import Deadline
from .actors.reply import CLOSED
from .runtime import Runtime
from .wire.text import json_text, printable

if TYPE_CHECKING:
    from .service.client import ServiceClient
    from .settings import ServerChanges, Settings
    from .store import Store

# The exit codes, one per error class: errors.EXIT_CODES (errors.exit_code looks one up).

PROG = "albedo-mcp"


class _Usage(Exception):
    """A usage problem the user can fix; exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit; we report one line
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Connect to configured MCP servers, list and call their tools; manage the servers and their credentials.",
        epilog="exit codes: 0 done, 1 tool error, 2 usage or configuration, 3 unavailable (add/edit/enable: "
        "the server could not connect, nothing saved), 4 unknown outcome, 5 timed out, 6 session failed, 7 store failed",
    )
    parser.add_argument("--home", help="configuration directory (default: $ALBEDO_HOME, else ~/.albedo)")
    parser.add_argument("--database", metavar="URL", help="store URL (default: $ALBEDO_DATABASE_URL, else SQLite at HOME/albedo.db)")
    parser.add_argument("--no-store", action="store_true", help="tools/call: open no store (no saved catalogues or credentials; every server is dialled)")
    parser.add_argument("--verbose", "-v", action="store_true", help="log what happens to stderr")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    tools = commands.add_parser("tools", help="list the operations every enabled server advertises")
    tools.add_argument("--json", action="store_true", help="print a JSON array")
    _place_options(tools)
    _no_store_option(tools)
    call = commands.add_parser("call", help="call one tool (or read_resource / get_prompt) by advertised name or SERVER/TOOL")
    call.add_argument("name", metavar="NAME", help="an advertised name (mcp_SERVER_TOOL_HASH, as 'tools' prints it) or SERVER/TOOL")
    call.add_argument("--args", default=None, metavar="JSON", help="the arguments, a JSON object")
    call.add_argument("--json", action="store_true", help="print the CallToolResult as JSON")
    call.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                      help="the call's one deadline, counted from now: a dial on the call's path, signing in and the call "
                           "all end by it (default: the server's startupTimeoutMs, then its callTimeoutMs)")
    call.add_argument("--hidden", action="store_true",
                      help="call a tool even though it is kept from the model (its inputSchema was left out as "
                           "invalid or too large); a tool disabled in extensions.json is never called")
    _place_options(call)
    _no_store_option(call)
    commands.add_parser("demo", help="show what albedo_actors does, on the bundled demo server")
    _admin_parsers(commands)
    _serve_parser(commands)
    _store_parsers(commands)
    return parser


_SECRETS_HELP = (
    "secrets are never taken from the command line: each is read without echo from the terminal, "
    "or as one line of standard input (order: bearer token, header value, env entries, OAuth client secret)"
)

def _place_options(sub: argparse.ArgumentParser) -> None:
    # --home and --database after the command too; SUPPRESS keeps a value given before it.
    sub.add_argument("--home", default=argparse.SUPPRESS, help="configuration directory")
    sub.add_argument("--database", default=argparse.SUPPRESS, metavar="URL", help="store URL (default: $ALBEDO_DATABASE_URL, else HOME/albedo.db)")
    sub.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help="log what happens to stderr")


def _no_store_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--no-store", action="store_true", default=argparse.SUPPRESS,
                     help="open no store: no saved catalogues or credentials, every server is dialled")


def _admin_parsers(commands: Any) -> None:
    def admin(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _place_options(sub)
        return sub

    def secrets(sub: argparse.ArgumentParser) -> None:
        group = sub.add_argument_group("secrets", _SECRETS_HELP)
        group.add_argument("--bearer-token", action="store_true", help="read a bearer token (HTTP)")
        group.add_argument("--bearer-token-from-stdin", dest="bearer_token", action="store_true", help=argparse.SUPPRESS)
        group.add_argument("--bearer-token-env", metavar="VAR", help="take the bearer token from this variable of your environment")
        group.add_argument("--header", metavar="NAME", help="one custom HTTP header; its value is read like a secret")
        group.add_argument("--header-env", metavar="VAR", help="take the --header value from this variable of your environment")
        group.add_argument("--env", action="append", default=[], metavar="KEY", help="a KEY=value env entry for a stdio server; the value is read like a secret (repeatable)")
        group.add_argument("--env-from", action="append", default=[], metavar="KEY=VAR", help="an env entry whose value is taken from VAR of your environment (repeatable)")
        group.add_argument("--oauth-client-id", metavar="ID", help="HTTP: an OAuth client registered by hand for signing in ('-' forgets it)")
        group.add_argument("--oauth-client-secret", action="store_true", help="read that client's secret like a secret")
        group.add_argument("--oauth-client-secret-env", metavar="VAR", help="take that client's secret from this variable of your environment")
        group.add_argument("--stdin", action="store_true", help="read the secrets from standard input even on a terminal")

    servers = admin("servers", "list the configured servers (never a secret)")
    servers.add_argument("--json", action="store_true", help="print a JSON array")
    add = admin("add", "add a server; it must connect unless --disabled (else nothing is saved, exit 3)")
    add.add_argument("target", metavar="TARGET", help="the URL (http) or the command line as one shell-quoted string (stdio; no shell runs)")
    add.add_argument("--transport", choices=("http", "stdio"), default="http", help="default: http")
    add.add_argument("--name", help="default: suggested from the URL host (mcp.example.com -> example) or the command's package")
    add.add_argument("--disabled", action="store_true", help='save it switched off ("enabled": false); it is not tried')
    secrets(add)
    edit = admin("edit", "change a server's URL, command or secrets; it must connect unless disabled (else exit 3)")
    edit.add_argument("name", metavar="NAME")
    edit.add_argument("--url", help="the new URL (http)")
    edit.add_argument("--command", dest="command_line", metavar="LINE", help="the new command line, one shell-quoted string (stdio)")
    secrets(edit)
    for name, help in (
        ("remove", "delete a server, its credentials and its saved catalogue"),
        ("enable", "switch a server back on; it must connect (else it stays off, exit 3)"),
        ("disable", 'switch a server off ("enabled": false)'),
    ):
        admin(name, help).add_argument("name", metavar="NAME")
    sign_in = admin("sign-in", "sign in to an HTTP server with OAuth (prints the URL, opens the browser unless ALBEDO_NO_BROWSER)")
    sign_in.add_argument("name", metavar="NAME")
    sign_in.add_argument("--timeout", type=float, default=300.0, metavar="S", help="give up after S seconds (default 300)")
    sign_in.add_argument("--port", type=int, default=33418, metavar="P",
                         help="loopback callback port (default 33418; a busy port falls back to an ephemeral one)")
    sign_in.add_argument("--new-client", action="store_true",
                         help="register a new OAuth client instead of reusing the one kept for its authorization server "
                              "(never replaces a client you configured)")
    sign_in.add_argument("--no-browser", action="store_true",
                         help="do not open the browser (as ALBEDO_NO_BROWSER does); the URL is printed either way")
    admin("sign-out", "forget a server's OAuth tokens").add_argument("name", metavar="NAME")
    extension = admin("extension", "list the extensions' defaults for every session, or turn one on or off")
    extension.add_argument("extension", nargs="?", metavar="EXTENSION", help="mcp or editor-mcp")
    extension.add_argument("state", nargs="?", choices=("on", "off"), help="on or off for every session that does not choose")
    extension.add_argument("--json", action="store_true", help="print a JSON object (extension -> on)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    try:
        args = _parser().parse_args(argv)
    except _Usage as exc:
        _error(f"{exc} (see {PROG} --help)")
        return EXIT_USAGE
    # Log messages quote what servers sent: escaped like every other line printed.
    log_handler = logging.StreamHandler()
    log_handler.setFormatter(_PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.CRITICAL, handlers=[log_handler])
    if not args.verbose:
        logging.getLogger("pykka").setLevel(logging.CRITICAL)
    # peewee logs every query with its parameters at DEBUG: those may be secrets.
    logging.getLogger("peewee").setLevel(logging.INFO)
    try:
        if args.command == "tools":
            return _tools(args)
        if args.command == "call":
            return _call(args)
        if args.command == "demo":
            from .demo.run import run_demo

            return run_demo(out=sys.stdout)
        if args.command == "serve":
            return _serve(args)
        if args.command == "open":
            return _open_page(args)
        if args.command == "store":
            return _store_command(args)
        if args.command in _ADMIN:
            return _admin(args)
        _error(f"a command is required: tools, call, demo, servers, add, edit, remove, enable, disable, sign-in, sign-out, extension, serve, open or store (see {PROG} --help)")
        return EXIT_USAGE
    except _Usage as exc:
        _error(str(exc))
        return EXIT_USAGE
    except AlbedoError as exc:
        _error(str(exc))
        return exit_code(exc)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except (pykka.Timeout, pykka.ActorDeadError) as exc:  # the demo waits on the session's own futures
        error = SessionClosed(CLOSED) if isinstance(exc, pykka.ActorDeadError) else \
            SessionTimedOut("the MCP session did not answer in time; try again")
        _error(str(error))
        return exit_code(error)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if args.verbose:
            logging.getLogger(__name__).exception("unexpected error")
        _error(f"unexpected error: {type(exc).__name__}: {exc} (run with --verbose for details)")
        return EXIT_TOOL_ERROR


def _tools(args: argparse.Namespace) -> int:
    config = load(resolve_home(args.home))
    # With a store, a server with a saved catalogue is listed from it without being
    # started (its first call dials it); the others are dialled, all at once.
    with _store_for(args, config.home) as store, _runtime(config, store) as runtime:
        composition = runtime.composition()
        for warning in (*composition.warnings, *composition.operation_warnings):
            _warn(warning)
        tools = composition.operations
    if args.json:
        _print_json([tool.as_json() for tool in tools])
    else:
        for tool in tools:
            summary = " ".join(tool.description.split())
            _out(f"{tool.name}\t{printable(summary, limit=160)}" if summary else tool.name)
    return EXIT_OK


def _runtime(config: McpConfig, store: Store | None) -> Runtime:
    """The runtime over ``config``'s servers; saved catalogues are not re-dialled in the background.

    The command line's session chooses the extension on (an admin tool works whatever
    the configured default says)."""
    return Runtime(config.home, store, config=config, background=False, enabled=True, watch=False)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86_400:  # NaN and infinities fail too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 and below 86400")
    return value


def _call(args: argparse.Namespace) -> int:
    # The call's one deadline starts here, before the runtime opens: starting the
    # server, a sign-in and the call itself all end by it.
    args.deadline = Deadline.after(args.timeout) if args.timeout is not None else None
    arguments = _arguments(args.args)
    config = load(resolve_home(args.home))
    if "/" in args.name:
        server_name = args.name.partition("/")[0]
        candidates = [config.server(server_name)]
        if not candidates[0].enabled:
            raise _Usage(f"server {server_name!r} is disabled in extensions.json")
    else:
        # An advertised name carries a hash, so it cannot be split back into server and
        # tool: connect the servers whose prefix fits, then match the name exactly.
        fitting = [s for s in config.servers if args.name.startswith(server_prefix(s.name))]
        if not fitting:
            raise _Usage(f"no configured server advertises {args.name!r}; use an advertised name from '{PROG} tools' or SERVER/TOOL")
        candidates = [s for s in fitting if s.enabled]
        if not candidates:
            raise _Usage(f"server {fitting[0].name!r} is disabled in extensions.json")
    # Only the servers the name can mean are prepared (and so started).
    chosen_config = dataclasses.replace(config, servers=tuple(candidates))
    with _store_for(args, config.home) as store:
        if store is not None:
            # Credentials that cannot be read are their server's store error (exit 7, the
            # line says what to do) when no other server can be the one called.
            stored = store.get_credentials_of([s.name for s in candidates])
            unreadable = [value for value in stored.values() if isinstance(value, StoreError)]
            if unreadable and len(unreadable) == len(candidates):
                raise unreadable[0]
        return _call_in(args, chosen_config, store, arguments)


def _call_in(args: argparse.Namespace, chosen_config: McpConfig, store: Store | None, arguments: dict[str, Any] | None) -> int:
    with _runtime(chosen_config, store) as runtime:
        session = runtime.composition()
        if not session.catalogues:
            name, reason = next(iter(session.left_out.items()))
            raise Unavailable(name, reason)
        for warning in session.warnings:
            _warn(warning)
        # The one resolver (Composition.resolve): the operation and its client, both of this session.
        chosen, handle = session.resolve(args.name, hidden=args.hidden, listing=f"'{PROG} tools'", hidden_option="--hidden")
        _check_operation_arguments(chosen, arguments)
        progress = _progress_line(chosen, args.json)
        try:
            # The one call pipeline (catalogue/composition.py): issue 16's output check,
            # ended by the call's deadline (issue 23).
            done = perform(session, chosen, handle, arguments or {}, on_progress=progress, deadline=args.deadline)
        finally:
            if progress is not None:
                progress.clear()  # the reporter has ended: nothing writes after this
        result = done.result
        if done.warning is not None:  # issue 16: one warning line; --json prints the server's JSON alone
            _warn(done.warning)
        if done.schema_errors:
            more = " (and more)" if len(done.schema_errors) > 1 else ""
            _warn(f"server {chosen.server!r}: tool {chosen.operation!r}: its result does not match its "
                  f"outputSchema: {done.schema_errors[0]}{more}")
    if args.json:
        _print_json(result)
    else:
        _print_result(result)
    if chosen.kind == "tool" and result.get("isError") is True:
        _error(f"server {chosen.server!r}: tool {chosen.operation!r} reported an error")
        return EXIT_TOOL_ERROR
    return EXIT_OK


class _ProgressLine:
    """A tool's progress on stderr, one line rewritten in place (a terminal only)."""

    def __init__(self, label: str) -> None:
        self._label = label
        self.shown = False

    def __call__(self, report: Any) -> None:
        line = f"{self._label}: {report.line()}"[:200]  # the report's text is escaped already
        sys.stderr.write(f"\r{line}\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _progress_line(entry: Advertised, as_json: bool) -> _ProgressLine | None:
    """A progress line when stderr is a terminal and the output is not ``--json``."""
    if as_json or entry.kind != "tool" or not (sys.stderr is not None and sys.stderr.isatty()):
        return None
    return _ProgressLine(printable(f"{entry.server}/{entry.operation}", one_line=True, limit=80))


def _check_operation_arguments(entry: Advertised, arguments: dict[str, Any] | None) -> None:
    """The command line's own word on a read_resource or get_prompt's ``--args``."""
    arguments = arguments or {}
    if entry.kind == "read_resource":
        uri = arguments.get("uri")
        if not isinstance(uri, str) or set(arguments) - {"uri"}:
            raise _Usage('read_resource takes --args \'{"uri": "..."}\'')
    elif entry.kind == "get_prompt":
        prompt, prompt_arguments = arguments.get("name"), arguments.get("arguments")
        if (
            not isinstance(prompt, str)
            or set(arguments) - {"name", "arguments"}
            or not (prompt_arguments is None or (isinstance(prompt_arguments, dict) and all(isinstance(v, str) for v in prompt_arguments.values())))
        ):
            raise _Usage('get_prompt takes --args \'{"name": "...", "arguments": {"key": "text"}}\'')


# -- serve: a host with the settings service --------------------------------------------------


def _serve_parser(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run a host (a runtime and its session) with the settings service on 127.0.0.1",
                                description="Run a host with the settings service: the one writer of the home while it runs. "
                                            "Prints the browser URL; SIGTERM or Ctrl-C stops it.")
    _place_options(serve)
    serve.add_argument("--port", type=int, default=0, metavar="N", help="the port on 127.0.0.1 (default 0: an ephemeral one)")
    page = commands.add_parser("open", help="open the settings page of the running service (a new single-use link)",
                               description="Ask the running settings service for a new link to its page, print it, and open "
                                           "it in the browser (unless --no-browser or ALBEDO_NO_BROWSER). The link works once.")
    _place_options(page)
    page.add_argument("--no-browser", action="store_true", help="only print the link")


def _serve(args: argparse.Namespace) -> int:
    """``serve``: a Runtime over the home's store, and the Service beside it, until SIGTERM or SIGINT.

    A save through the service (and a sign-in that ended) tells the session to reload
    once, between turns. Stopping ends the service (service.json removed), then the
    runtime (every server process ends), then the store.
    """
    import signal
    import threading

    from .actors.composer import Reload
    from .service.server import Service
    from .store import open_store

    home = resolve_home(args.home)
    if not 0 <= args.port <= 65535:
        raise _Usage(f"--port must be from 0 to 65535, not {args.port}")
    stopping = threading.Event()
    handlers = {sig: signal.signal(sig, lambda signum, frame: stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    runtimes: list[Runtime] = []
    early = threading.Event()  # a save landed while the runtime was still starting

    def reload_sessions() -> None:
        if not runtimes:
            early.set()
        for runtime in list(runtimes):
            try:
                runtime.send(Reload())  # the reply is not waited on: the swap lands between turns
            except AlbedoError as exc:
                logging.getLogger(__name__).info("the session was not reloaded: %s", exc)

    store = open_store(home, url=args.database)
    try:
        with Service(home, store, port=args.port, on_saved=reload_sessions) as service:
            with Runtime(home, store) as runtime:
                runtimes.append(runtime)
                if early.is_set():  # it may have read the settings before that save
                    reload_sessions()
                _out(f"albedo-mcp: settings service for {home}: open {service.open_url()} "
                     f"(that link works once; `{PROG} open` gives another; SIGTERM or Ctrl-C stops the service)",
                     flush=True)
                while not stopping.wait(0.5):
                    pass
                runtimes.clear()
    finally:
        store.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return EXIT_OK


def _open_page(args: argparse.Namespace) -> int:
    """``open``: a new single-use link to the running service's page, printed and opened."""
    from .auth.browser import open_local_file
    from .service.client import ServiceClient, ServiceSilent

    home = resolve_home(args.home)
    try:
        client = ServiceClient.find(home)
    except ServiceSilent as exc:
        raise SessionTimedOut(str(exc).partition("; acting")[0] + "; try again") from None
    if client is None:
        raise ConfigError(f"no settings service runs for {home}; start one with `{PROG} serve`")
    url = client.new_link()
    _out(f"Open this link (it works once): {url}", flush=True)
    if not args.no_browser:
        # Never the link on the browser's command line, which every local user can read
        # in /proc: a page of the user's own (0600, in the 0700 home) that forwards to it.
        import html

        from .safefiles import replace_private
        from .service.local import PAGE_LINK_FILE

        page = os.path.join(home, PAGE_LINK_FILE)
        target = html.escape(url, quote=True)
        replace_private(page, f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                              f'<meta http-equiv="refresh" content="0;url={target}">'
                              f'<title>albedo-mcp settings</title><a href="{target}">Open the settings page</a>\n')
        open_local_file(page)
    return EXIT_OK


# -- store: the encryption of the secrets at rest --------------------------------------------


def _store_parsers(commands: Any) -> None:
    store = commands.add_parser("store", help="encrypt the stored secrets, rotate or make the key, show the status",
                                description="The secrets in the store (tokens, refresh tokens, client secrets, header "
                                            "and env values) are encrypted at rest with AES-256-GCM when "
                                            "$ALBEDO_STORE_KEY (or $ALBEDO_STORE_KEY_FILE) gives a key.")
    actions = store.add_subparsers(dest="store_command", metavar="ACTION", parser_class=_Parser)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        _place_options(sub)
        return sub

    new_key = action("new-key", "print a new store key (32 random bytes, base64url), or write it to a new file")
    new_key.add_argument("--file", metavar="PATH", help="write it to PATH (created 0600; an existing file is never replaced)")
    action("status", "count the rows whose secrets are in clear, and those encrypted under each key id (needs no key)")
    action("encrypt", "encrypt every row under $ALBEDO_STORE_KEY, one row per transaction (safe to kill and run again)")
    rotate = action("rotate-key", "re-encrypt every row under a new key; the current one ($ALBEDO_STORE_KEY) opens them")
    rotate.add_argument("--new-key-file", metavar="PATH",
                        help="the file holding the new key (default: $ALBEDO_STORE_NEW_KEY, else $ALBEDO_STORE_NEW_KEY_FILE)")
    action("decrypt", "write every row back in clear (needs the key)")


def _store_command(args: argparse.Namespace) -> int:
    from .store import open_store, sealing

    action = getattr(args, "store_command", None)
    if action is None:
        raise _Usage(f"store needs an action: new-key, status, encrypt, rotate-key or decrypt (see {PROG} store --help)")
    if action == "new-key":
        key = sealing.new_key()
        if not args.file:
            _out(key)
            return EXIT_OK
        try:
            fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise _Usage(f"store new-key: {args.file} cannot be created ({exc.strerror or type(exc).__name__}); "
                         "give a path where no file is") from None
        with os.fdopen(fd, "w", encoding="ascii") as f:
            os.fchmod(fd, 0o600)
            f.write(key + "\n")
        _out(f"wrote a new store key (key id {sealing.key_id(sealing.parse_key(key, 'the new key'))}) to {args.file}")
        return EXIT_OK
    home = resolve_home(args.home)
    keys: Any = sealing.keys_from(os.environ)  # FROM_ENVIRON would read them again
    if action == "rotate-key":
        if keys is None:
            raise StoreError(f"store rotate-key: no current key: {sealing.NEEDS_KEY}")
        new = sealing.new_key_from(os.environ, args.new_key_file)
        if new is None:
            raise _Usage("store rotate-key: give the new key with --new-key-file PATH or $ALBEDO_STORE_NEW_KEY "
                         "(make one with: albedo-mcp store new-key)")
        keys = sealing.StoreKeys(new, (keys.key,) + keys.also_open)
    store = open_store(home, url=args.database, keys=keys)
    try:
        if action == "status":
            counts = store.sealing_status()
            current = f" (the key given is {keys.kid})" if keys is not None else " (no key is set)"
            damaged = counts.pop("damaged", 0)
            _out(f"{counts.pop('plaintext')} rows in clear" + "".join(
                f", {n} encrypted under {label}" for label, n in sorted(counts.items()))
                + (f", {damaged} damaged (a value starts with enc:v1: but is not an encrypted value)" if damaged else "")
                + current)
            return EXIT_OK
        # A row that cannot be read is one warning line and is left as it is; the others are done.
        unreadable: list[str] = []

        def left_alone(line: str) -> None:
            unreadable.append(line)
            _warn(line)

        done = store.reseal(to_plaintext=action == "decrypt", unreadable=left_alone)
        verb = {"encrypt": "encrypted", "rotate-key": "re-encrypted", "decrypt": "decrypted"}[action]
        under = f" under key {keys.kid}" if action != "decrypt" and keys is not None else ""
        left = f"; {len(unreadable)} cannot be read and were left as they are" if unreadable else ""
        _out(f"{verb} {done['rewritten']} rows{under}; {done['kept']} were so already{left}")
        if action == "rotate-key" and not unreadable:
            _out(f"now set ALBEDO_STORE_KEY (or ALBEDO_STORE_KEY_FILE) to the new key (key id {keys.kid})")
        return EXIT_STORE if unreadable else EXIT_OK
    finally:
        store.close()


# -- admin commands ---------------------------------------------------------------------------

_ADMIN = ("servers", "add", "edit", "remove", "enable", "disable", "sign-in", "sign-out", "extension")


@contextlib.contextmanager
def _store_for(args: argparse.Namespace, home: str) -> Iterator[Any]:
    """The store (credentials, saved catalogues) for tools/call: the one a host uses.

    ``--database``, else ``$ALBEDO_DATABASE_URL``, else HOME/albedo.db, created (0600,
    in a 0700 home; see :mod:`albedo_actors.safefiles`) when missing, so that the first
    ``tools`` saves the catalogues every later run lists from. ``--no-store``: none.
    """
    if getattr(args, "no_store", False):
        if args.database:
            raise _Usage("give --database or --no-store, not both")
        yield None
        return
    url = args.database or os.environ.get("ALBEDO_DATABASE_URL")
    from .store import open_store

    store = open_store(home, url=url)
    try:
        yield store
    finally:
        store.close()


def _auth_text(auth: Any) -> str:
    """The auth column of ``servers``: state, and what helps (never a token)."""
    state = auth.get("state", "none")
    if state == "none":
        return "auth: none"
    parts = [f"auth: {state}"]
    if state == "signed_in" and auth.get("account"):
        parts.append(f"as {auth['account']}")
    if state == "signed_in" and auth.get("expires_at"):
        parts.append("expires " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(auth["expires_at"])))
    if auth.get("scope"):
        parts.append(f"scope {auth['scope']}")
    if auth.get("step_up"):
        parts.append(f"step-up {auth['step_up']}")
    if auth.get("reason") and state != "signed_in":
        parts.append(str(auth["reason"]))
    return "; ".join(parts)


def _sign_in(settings: Settings, args: argparse.Namespace) -> int:
    """Run a sign-in: print the URL, open the browser, race the listener with a pasted URL."""
    import threading

    from .auth.browser import NO_BROWSER_ENV

    def announce(url: str) -> None:
        _out(f"Open this URL to sign in to {args.name}:\n{url}", flush=True)
        _out("Waiting for the browser; or paste the URL it was sent to (the callback) and press Enter.", flush=True)

    environ = {**os.environ, NO_BROWSER_ENV: "1"} if args.no_browser else None
    flow = settings.begin_sign_in(args.name, announce=announce, port=args.port, lifetime=args.timeout, environ=environ,
                                  new_client=args.new_client)
    done = threading.Event()

    reader = threading.Thread(target=_read_pasted, args=(done, flow.offer), name="sign-in-paste", daemon=True)
    reader.start()
    try:
        record = flow.run()
    except KeyboardInterrupt:
        flow.cancel()
        _error(f"server {args.name!r}: sign-in cancelled")
        return 130
    finally:
        done.set()
        reader.join(1.0)
    scope = f" (scope {record.scope})" if record.scope else ""
    _out(f"signed in to {args.name}{scope}")
    return EXIT_OK


_NOT_THIS_CALLBACK = "That URL is not this sign-in's callback (wrong or missing state); still waiting."


def _read_pasted(done: Any, offer: Callable[[str], bool]) -> None:
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
                print(_NOT_THIS_CALLBACK, file=sys.stderr, flush=True)


def _admin(args: argparse.Namespace) -> int:
    from .settings import ServerSpec, Settings, suggest_name
    from .store import open_store

    home = resolve_home(args.home)
    secrets = _read_secrets(args) if args.command in ("add", "edit") else None
    if args.command in _THROUGH_SERVICE:
        from .service.client import ServiceClient, ServiceGone, ServiceSilent

        try:
            client = ServiceClient.find(home)
        except ServiceSilent as exc:  # nothing was sent to it
            _warn(str(exc))
            client = None
        if client is not None:
            with client:
                try:
                    return _through_service(client, home, args, secrets)
                except ServiceGone:
                    # Refused before anything was sent: the service has gone; act directly.
                    logging.getLogger(__name__).info("the settings service of %s has gone; acting directly", home)
    if args.command == "extension":
        if args.extension is None or args.state is None:
            return _extension(Settings(home, None), args)  # type: ignore[arg-type]  # listing reads extensions.json only
        # A switch bumps the store's revision, so hosts sharing the database hear it
        # (settings_watch); a store that cannot be opened does not stop the switch.
        try:
            switching = open_store(home, url=args.database)
        except StoreError as exc:
            _warn(f"{exc}; the switch is saved in extensions.json, and hosts that share only the database "
                  "hear of it with the next change")
            return _extension(Settings(home, None), args)  # type: ignore[arg-type]
        try:
            return _extension(Settings(home, switching), args)
        finally:
            switching.close()
    store = open_store(home, url=args.database)
    try:
        settings = Settings(home, store)
        if args.command == "servers":
            views = settings.servers()
            if args.json:
                _print_json([view.as_json() for view in views])
            else:
                for view in views:
                    # A server whose credentials cannot be read shows the store's line in their
                    # place (what to do); the listing goes on and exits 0.
                    stored = view.problem or ", ".join(view.credentials) or "no credentials"
                    _out(f"{view.name}\t{view.transport}\t{view.state}\t{view.target}\t{stored}\t{_auth_text(view.auth)}")
            return EXIT_OK
        if args.command == "sign-in":
            return _sign_in(settings, args)
        if args.command == "sign-out":
            view = settings.sign_out(args.name)
            _out(f"signed out of {view.name}")
            return EXIT_OK
        if args.command == "add":
            if args.transport == "http":
                spec_kwargs: dict[str, Any] = {"url": args.target}
            else:
                words = _split(args.target, "TARGET")
                spec_kwargs = {"command": words[0], "args": tuple(words[1:])}
            name = args.name or suggest_name(args.transport, args.target, set(settings.names()))
            view = settings.add(ServerSpec(name=name, transport=args.transport, enabled=not args.disabled, **spec_kwargs), secrets)
            _out(f"added {view.name} ({view.transport}, {view.state})")
            return EXIT_OK
        if args.command == "edit":
            view = settings.edit(args.name, _changes(args), secrets)
            _out(f"saved {view.name} ({view.transport}, {view.state})")
            return EXIT_OK
        if args.command == "remove":
            settings.remove(args.name)
            _out(f"removed {args.name}")
            return EXIT_OK
        if args.command == "enable":
            view = settings.enable(args.name)
            _out(f"enabled {view.name} ({view.state})")
            return EXIT_OK
        view = settings.disable(args.name)
        _out(f"disabled {view.name}")
        return EXIT_OK
    finally:
        store.close()


# -- through a running settings service (the one writer of its home) ---------------------------

_THROUGH_SERVICE = ("add", "edit", "remove", "enable", "disable", "extension", "sign-in", "sign-out")


def _through_service(client: ServiceClient, home: str, args: argparse.Namespace, secrets: Any) -> int:
    """The admin command through the service's API: the same checks, output and exit codes.

    What the command reads (the entry it edits, the names taken) is read here; every
    change is one PATCH (or the sign-in API), which the service applies with
    :class:`~albedo_actors.settings.Settings` and after which its sessions reload.
    """
    from .config import EXTENSION_DEFAULTS
    from .settings import ServerSpec, Settings, edit_entry, new_entry, suggest_name

    reader = Settings(home, None)  # type: ignore[arg-type]  # reads extensions.json only, never the store
    if args.command == "extension":
        if args.extension is None:
            return _print_extensions(dict(client.get().get("enabled") or {}), args)
        if args.state is None:
            raise _Usage(f"say on or off: {PROG} extension {args.extension} on|off")
        if args.extension not in EXTENSION_DEFAULTS:
            raise ConfigError(f"no extension named {args.extension!r}; the extensions are {', '.join(sorted(EXTENSION_DEFAULTS))}")
        client.patch({"enabled": {args.extension: args.state == "on"}})
        _out(f"{args.extension} is {args.state} for every session that does not choose for itself")
        return EXIT_OK
    if args.command == "sign-in":
        return _sign_in_through(client, args)
    if args.command == "sign-out":
        client.patch({"secrets": {args.name: {"oauth": None}}}, name=args.name)
        _out(f"signed out of {args.name}")
        return EXIT_OK
    if args.command == "add":
        if args.transport == "http":
            spec_kwargs: dict[str, Any] = {"url": args.target}
        else:
            words = _split(args.target, "TARGET")
            spec_kwargs = {"command": words[0], "args": tuple(words[1:])}
        taken = {str(server.get("name")) for server in client.get().get("servers") or [] if isinstance(server, dict)}
        name = args.name or suggest_name(args.transport, args.target, taken)
        # Settings.add's checks (a PATCH of a known name would edit it).
        entry = new_entry(ServerSpec(name=name, transport=args.transport, enabled=not args.disabled, **spec_kwargs),
                          secrets, taken, reader.path)
        _check_kept(name, secrets, ())
        view = _saved(client, name, entry, secrets)
        _out(f"added {name} ({view.get('transport')}, {view.get('state')})")
        return EXIT_OK
    entry = reader._existing(reader._servers(reader._read_document()), args.name)
    name = args.name
    if args.command == "edit":
        edit_entry(name, entry, _changes(args), secrets)
        stored = [view.get("credentials") for view in client.get().get("servers") or []
                  if isinstance(view, dict) and view.get("name") == name]
        _check_kept(name, secrets, [str(item) for item in (stored[0] if stored and isinstance(stored[0], list) else [])])
        view = _saved(client, name, entry, secrets)
        _out(f"saved {name} ({view.get('transport')}, {view.get('state')})")
        return EXIT_OK
    if args.command == "remove":
        client.patch({"servers": {name: None}}, name=name)
        _out(f"removed {name}")
        return EXIT_OK
    if args.command == "enable":
        entry.pop("enabled", None)
        view = _saved(client, name, entry, None)
        _out(f"enabled {name} ({view.get('state')})")
        return EXIT_OK
    entry["enabled"] = False
    _saved(client, name, entry, None)
    _out(f"disabled {name}")
    return EXIT_OK


def _changes(args: argparse.Namespace) -> ServerChanges:
    """What ``edit`` changes: the URL, or the command and its arguments."""
    from .settings import ServerChanges

    if args.url is not None and args.command_line is not None:
        raise _Usage("give --url or --command, not both")
    if args.command_line is not None:
        words = _split(args.command_line, "--command")
        return ServerChanges(command=words[0], args=tuple(words[1:]))
    return ServerChanges(url=args.url)


def _check_kept(name: str, secrets: Any, stored: Sequence[str]) -> None:
    """What Settings refuses of blank secrets (kept) with nothing stored to keep, in its
    order and words: the service's API just keeps an omitted one. ``stored``: the server's
    credentials as ``servers --json`` names them ("header X-Key", "env KEY")."""
    from .config import _ENV_NAME, _HEADER_NAME

    if secrets.header is not None:
        header_name, value = secrets.header
        if not _HEADER_NAME.match(header_name or ""):
            raise ConfigError(f"server {name!r}: {header_name!r} is not an HTTP header name")
        if not value and not any(item.startswith("header ") for item in stored):
            raise ConfigError(f"server {name!r}: the {header_name} header has no stored value to keep; give one")
    for key, value in secrets.env.items():
        if not _ENV_NAME.match(key):
            raise ConfigError(f"server {name!r}: {key!r} is not an environment variable name")
        if not value and f"env {key}" not in stored:
            raise ConfigError(f"server {name!r}: env {key} has no stored value to keep; give one")


def _saved(client: ServiceClient, name: str, entry: dict[str, Any], secrets: Any) -> dict[str, Any]:
    """PATCH one server's entry (and its secrets); its view in the answer."""
    from .config import DEFAULT_STARTUP_TIMEOUT_MS
    from .service.client import READ_TIMEOUT_S

    body: dict[str, Any] = {"servers": {name: entry}}
    typed = _secrets_json(secrets) if secrets is not None else {}
    if typed:
        body["secrets"] = {name: typed}
    startup = entry.get("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS)
    startup_s = startup / 1000 if isinstance(startup, int) and not isinstance(startup, bool) and startup > 0 else 30.0
    # The save connects the server within its startupTimeoutMs, after any save ahead of it.
    answer = client.patch(body, name=name, timeout=max(READ_TIMEOUT_S, 2 * startup_s + 30.0))
    for view in answer.get("servers") or []:
        if isinstance(view, dict) and view.get("name") == name:
            return view
    raise ConfigError(f"server {name!r}: the settings service saved it but does not list it; see `{PROG} servers`")


def _secrets_json(secrets: Any) -> dict[str, Any]:
    """A SecretInput as the PATCH body's secrets: blank (kept) is left out, ``-`` is null."""
    from .settings import REMOVE

    out: dict[str, Any] = {}
    if secrets.bearer_token:
        out["bearerToken"] = None if secrets.bearer_token == REMOVE else secrets.bearer_token
    if secrets.header is not None:
        header_name, value = secrets.header
        # A name without a value renames the stored header, keeping its value.
        out["header"] = None if value == REMOVE else {"name": header_name, **({"value": value} if value else {})}
    env = {key: (None if value == REMOVE else value) for key, value in secrets.env.items() if value}
    if env:
        out["env"] = env
    if secrets.oauth_client is not None:
        client_id, secret = secrets.oauth_client
        if client_id == REMOVE:
            out["oauth_client"] = None
        else:
            # A blank secret keeps the stored one (for the same client id); "-" forgets it.
            out["oauth_client"] = {"clientId": client_id, "clientSecret": None if secret == REMOVE else (secret or "")}
    return out


def _forgotten(status: dict[str, Any]) -> str:
    """What a sign-in the service ran said of the kept registration it forgot ("" if nothing)."""
    from .auth.signin import FORGOTTEN

    reason = status.get("reason")
    return f"; {FORGOTTEN}" if isinstance(reason, str) and reason.endswith(FORGOTTEN) else ""


def _sign_in_through(client: ServiceClient, args: argparse.Namespace) -> int:
    """``sign-in`` through the service: PUT, show (and open) the URL, take a pasted callback
    URL, and poll the sign-in's state until it ends or ``--timeout`` passes."""
    import threading

    from .auth.browser import open_authorization_url
    from .service.client import ServiceSignInFailed

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
            _warn(str(exc))
        return True

    reader = threading.Thread(target=_read_pasted, args=(done, offer), name="sign-in-paste", daemon=True)
    status = started
    try:
        if started.get("state") == "pending":
            url = started.get("authorizationUrl")
            if not isinstance(url, str) or not url:
                raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the settings service gave no authorization URL")
            _out(f"Open this URL to sign in to {name}:\n{url}", flush=True)
            _out("Waiting for the browser; or paste the URL it was sent to (the callback) and press Enter.", flush=True)
            if not args.no_browser:
                try:
                    open_authorization_url(url)
                except ValueError as exc:
                    client.cancel_sign_in(name)
                    raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the authorization URL cannot be opened: {exc}") from None
            reader.start()
            deadline = time.monotonic() + args.timeout
            while True:
                status = client.sign_in_status(name)
                if status.get("state") != "pending":
                    break
                if time.monotonic() >= deadline:
                    client.cancel_sign_in(name)  # waits (bounded) for it to end: its reason says what it forgot
                    raise ServiceSignInFailed(name, f"server {name!r}: sign-in failed: the sign-in was not completed in time"
                                                    f"{_forgotten(client.sign_in_status(name))}")
                done.wait(min(0.25, max(0.0, deadline - time.monotonic())))  # polls the service; bounded by --timeout
    except KeyboardInterrupt:
        with contextlib.suppress(AlbedoError):
            client.cancel_sign_in(name)
        _error(f"server {name!r}: sign-in cancelled")
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
    _out(f"signed in to {name}{f' (scope {scope})' if scope else ''}")
    return EXIT_OK


def _extension(settings: Settings, args: argparse.Namespace) -> int:
    """``extension``: list the defaults, or turn one on or off for every session."""
    if args.extension is None:
        defaults = settings.extensions()
    elif args.state is None:
        raise _Usage(f"say on or off: {PROG} extension {args.extension} on|off")
    else:
        defaults = settings.set_extension(args.extension, args.state == "on")
        _out(f"{args.extension} is {args.state} for every session that does not choose for itself")
        return EXIT_OK
    return _print_extensions(defaults, args)


def _print_extensions(defaults: dict[str, bool], args: argparse.Namespace) -> int:
    if args.json:
        _print_json(defaults)
    else:
        for name, on in sorted(defaults.items()):
            _out(f"{name}\t{'on' if on else 'off'}")
    return EXIT_OK


def _split(line: str, what: str) -> list[str]:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise _Usage(f"{what} is not a valid command line: {exc}") from None
    if not words:
        raise _Usage(f"{what} names no command")
    return words


def _read_secrets(args: argparse.Namespace) -> Any:
    """Read every secret the options name, in the documented order; never from argv."""
    from .settings import SecretInput

    if args.bearer_token and args.bearer_token_env:
        raise _Usage("give --bearer-token or --bearer-token-env, not both")
    if args.header_env and not args.header:
        raise _Usage("--header-env needs --header NAME")
    reader = _SecretReader(args.stdin, editing=args.command == "edit")
    bearer = None
    if args.bearer_token_env:
        bearer = _from_environment(args.bearer_token_env, "--bearer-token-env")
    elif args.bearer_token:
        bearer = reader.read("bearer token")
    header = None
    if args.header:
        value = _from_environment(args.header_env, "--header-env") if args.header_env else reader.read(f"value of header {args.header}")
        header = (args.header, value)
    env: dict[str, str] = {}
    for key in args.env:
        if "=" in key:
            # Say nothing of what follows the "=": it may be a secret.
            raise _Usage("--env takes a KEY only; its value is read without echo or from standard input, never from the command line")
        env[key] = reader.read(f"value of env {key}")
    for item in args.env_from:
        key, sep, variable = item.partition("=")
        if not sep or not key or not variable:
            raise _Usage("--env-from takes KEY=VAR (VAR: a variable of your environment holding the value)")
        env[key] = _from_environment(variable, "--env-from")
    oauth_client = None
    if (args.oauth_client_secret or args.oauth_client_secret_env) and not args.oauth_client_id:
        raise _Usage("--oauth-client-secret needs --oauth-client-id ID")
    if args.oauth_client_secret and args.oauth_client_secret_env:
        raise _Usage("give --oauth-client-secret or --oauth-client-secret-env, not both")
    if args.oauth_client_id:
        secret = None
        if args.oauth_client_secret_env:
            secret = _from_environment(args.oauth_client_secret_env, "--oauth-client-secret-env")
        elif args.oauth_client_secret:
            secret = reader.read(f"secret of OAuth client {args.oauth_client_id}")
        oauth_client = (args.oauth_client_id, secret)
    return SecretInput(bearer_token=bearer, header=header, env=env, oauth_client=oauth_client)


def _from_environment(variable: str, option: str) -> str:
    if own_variable(variable):  # the store key must not become a server's stored secret
        raise _Usage(f"{option}: ${variable} is {OWN_VARIABLE}")
    value = os.environ.get(variable)
    if value is None:
        raise _Usage(f"{option}: ${variable} is not set")
    return value


class _SecretReader:
    """Reads secrets: a prompt without echo on a terminal, else one line of stdin each."""

    def __init__(self, force_stdin: bool, editing: bool) -> None:
        self.interactive = not force_stdin and sys.stdin is not None and sys.stdin.isatty()
        self.hint = " (blank keeps, - removes)" if editing else ""

    def read(self, what: str) -> str:
        if self.interactive:
            return getpass.getpass(f"{what}{self.hint}: ")
        line = sys.stdin.readline() if sys.stdin is not None else ""
        if not line:
            raise _Usage(f"standard input ended before the {what}; give one line per secret")
        return line.rstrip("\r\n")


def _arguments(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _Usage(f"--args is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Usage("--args must be a JSON object, e.g. --args '{\"text\": \"hi\"}'")
    return value


def _print_result(result: dict[str, Any]) -> None:
    content = result.get("content")
    printed = False
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            _out(block.get("text", ""))
        elif kind in ("image", "audio"):
            size = len(block.get("data") or "") * 3 // 4
            _out(f"[{kind} {block.get('mimeType', '?')}, about {size} bytes]")
        elif kind == "resource_link":
            _out(f"[link {block.get('uri', '?')}]")
        elif kind == "resource":
            resource = block.get("resource")
            resource = resource if isinstance(resource, dict) else {}
            _out(resource["text"] if isinstance(resource.get("text"), str) else f"[resource {resource.get('uri', '?')}]")
        else:
            _out(f"[{kind} content]")
        printed = True
    contents = result.get("contents")
    for item in contents if isinstance(contents, list) else []:  # resources/read
        if isinstance(item, dict):
            if isinstance(item.get("text"), str):
                _out(item["text"])
            else:
                size = len(item.get("blob") or "") * 3 // 4
                _out(f"[resource {item.get('uri', '?')} {item.get('mimeType', '?')}, about {size} bytes]")
            printed = True
    messages = result.get("messages")
    for message in messages if isinstance(messages, list) else []:  # prompts/get
        if isinstance(message, dict):
            block = message.get("content")
            block = block if isinstance(block, dict) else {}
            text = block.get("text") if block.get("type") == "text" and isinstance(block.get("text"), str) else f"[{block.get('type', '?')} content]"
            _out(f"{message.get('role', '?')}: {text}")
            printed = True
    if not printed and "structuredContent" in result:
        _print_json(result["structuredContent"])


def _print_json(value: Any) -> None:
    # Exact JSON (json.loads gives back what the server sent), with no raw control,
    # C1, bidi override or lone surrogate in it: see albedo_actors.wire.text.
    sys.stdout.write(json_text(value, indent=2) + "\n")


def _out(text: Any, flush: bool = False) -> None:
    """Print to stdout through the escaping rule (lines and tabs kept)."""
    print(printable(text), flush=flush)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {printable(message, one_line=True)}", file=sys.stderr)


def _error(message: str) -> None:
    print(f"{PROG}: {printable(message, one_line=True)}", file=sys.stderr)


class _PrintableFormatter(logging.Formatter):
    """--verbose log lines through the escaping rule (a traceback keeps its lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


if __name__ == "__main__":
    sys.exit(main())

"""The command line's entry: the parser of every command, and ``main``, which turns every error into one line and an exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

import pykka

from .. import __version__
from ..actors.reply import CLOSED
from ..catalogue.search import DEFAULT_LIMIT, MAX_LIMIT
from ..errors import (
    EXIT_TOOL_ERROR,
    EXIT_USAGE,
    AlbedoError,
    SessionClosed,
    SessionTimedOut,
    exit_code,
)
from .admin import ADMIN, admin_command, admin_parsers
from .completion import complete_if_asked, completion_command, completion_parser
from .doctor import doctor_command, doctor_parser
from .exporting import export_command, export_parsers
from .importing import import_command, import_parsers
from .options import PROG, Parser, Usage, no_store_option, place_options
from .output import PrintableFormatter, closed_pipe, failure
from .run import call_command, search_command, seconds, tools_command
from .serve import open_command, serve_command, serve_parsers
from .store_keys import store_command, store_parsers
from .tasks import tasks_command, tasks_parser
from .trust import approve_command, approve_parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Connect to configured MCP servers, list and call their tools; manage the servers and their credentials.",
        epilog="exit codes: 0 done, 1 tool error, 2 usage or configuration, 3 unavailable (add/edit/enable: "
        "the server could not connect, nothing saved; doctor: a server checked is not ok), 4 unknown outcome, 5 timed out, 6 session failed, 7 store failed",
    )
    parser.add_argument("--home", help="configuration directory (default: $ALBEDO_HOME, else ~/.albedo)")
    parser.add_argument("--database", metavar="URL", help="store URL (default: $ALBEDO_DATABASE_URL, else SQLite at HOME/albedo.db)")
    parser.add_argument("--no-store", action="store_true", help="tools/call: open no store (no saved catalogues or credentials; every server is dialled)")
    parser.add_argument("--verbose", "-v", action="store_true", help="log what happens to stderr")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    tools = commands.add_parser("tools", help="list the operations every enabled server offers, as SERVER/TOOL(params)")
    tools.add_argument("servers", nargs="*", metavar="SERVER", help="list only these servers")
    tools.add_argument("--json", action="store_true", help="print a JSON array (the advertised names, schemas, savedAt)")
    tools.add_argument("--refresh", action="store_true",
                       help="dial every server now instead of listing from saved catalogues, and save what they list")
    tools.add_argument("--model", action="store_true",
                       help="show what the model is offered: the advertised names, under the budget (mcp.advertise)")
    tools.add_argument("--budget", type=budget, default=None, metavar="N",
                       help="with --model: offer at most N operations, the search tool among them (implies --model)")
    tools.add_argument("--held", action="store_true",
                       help="show the tools held since they changed or appeared (tool integrity): what changed, and how to approve")
    place_options(tools)
    no_store_option(tools)
    call = commands.add_parser("call", help="call one tool (or read_resource / get_prompt) by SERVER/TOOL or advertised name")
    call.add_argument("name", metavar="NAME", help="SERVER/TOOL, an advertised name (mcp_SERVER_TOOL_HASH, as "
                      "'tools --json' gives it), or mcp_search_tools")
    call.add_argument("arguments", nargs="*", metavar="KEY=VALUE",
                      help="an argument, its value coerced by the tool's inputSchema (n=5 is a number where the "
                           "schema says number, text=5 a string where it says string); KEY:=JSON gives a JSON value as it is")
    call.add_argument("--args", default=None, metavar="JSON",
                      help="the arguments, a JSON object (KEY=VALUE arguments add keys to it or replace them)")
    call.add_argument("--json", action="store_true", help="print the CallToolResult as JSON")
    call.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                      help="the call's one deadline, counted from now: a dial on the call's path, signing in and the call "
                           "all end by it (default: the server's startupTimeoutMs, then its callTimeoutMs)")
    call.add_argument("--hidden", action="store_true",
                      help="call a tool even though it is kept from the model (its inputSchema was left out as "
                           "invalid or too large); a tool disabled in extensions.json is never called")
    call.add_argument("--no-check", action="store_true",
                      help="send the arguments without checking them against the tool's inputSchema first")
    place_options(call)
    no_store_option(call)
    search = commands.add_parser("search", help="search the operations of every enabled server, as the model's "
                                 "mcp_search_tools does")
    search.add_argument("query", nargs="+", metavar="WORD", help="what the tool should do, in a few words")
    search.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"list at most N (1 to {MAX_LIMIT}; default {DEFAULT_LIMIT})")
    search.add_argument("--json", action="store_true", help="print a JSON array, as tools --json")
    place_options(search)
    no_store_option(search)
    commands.add_parser("demo", help="show what albedo_actors does, on the bundled demo server")
    doctor_parser(commands, place_options)
    completion_parser(commands)
    admin_parsers(commands)
    import_parsers(commands)
    export_parsers(commands)
    serve_parsers(commands)
    store_parsers(commands)
    approve_parser(commands)
    tasks_parser(commands)
    return parser


# The commands whose last positional takes many words, and its name: argparse stops
# filling it at the first option, so the words after one are added here.
TRAILING = {"call": "arguments", "tools": "servers", "search": "query", "tasks": "words"}


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed command line (``call a/echo text=hi --json n=5`` keeps both arguments).

    Raises:
        Usage: argparse's refusal, or words it does not know.
    """
    args, extra = parser.parse_known_args(argv)
    if extra:
        field = TRAILING.get(getattr(args, "command", None) or "")
        if field is None or any(word.startswith("-") for word in extra):
            raise Usage(f"unrecognized arguments: {' '.join(extra)}")
        setattr(args, field, [*getattr(args, field), *extra])
    return args


def budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 2 (one place is the search tool)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it).

    A reader that goes away early (``albedo-mcp tools | head -1``) ends the run quietly
    with exit 141, as a program killed by SIGPIPE does: no traceback, and no complaint
    from Python's flush at exit (stdout and stderr then point at /dev/null)."""
    try:
        try:
            return run_command_line(argv)
        finally:
            # The last buffered lines are written here, not at interpreter exit, so a
            # closed pipe is found while it can still be handled.
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()


def run_command_line(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command; every error becomes one line (and, with --json, a JSON object)."""
    parser = build_parser()
    complete_if_asked(parser)  # only when a shell's completion script runs us
    try:
        args = parse(parser, argv)
    except Usage as exc:
        # --json among the words asks for the JSON error too, though the parse failed.
        words = list(sys.argv[1:] if argv is None else argv)
        asked = "--json" in words[: words.index("--")] if "--" in words else "--json" in words
        return failure(Usage(f"{exc} (see {PROG} --help)"), EXIT_USAGE, as_json=asked)
    # Log messages quote what servers sent: escaped like every other line printed.
    log_handler = logging.StreamHandler()
    log_handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.CRITICAL, handlers=[log_handler])
    if not args.verbose:
        logging.getLogger("pykka").setLevel(logging.CRITICAL)
    # peewee logs every query with its parameters at DEBUG: those may be secrets.
    logging.getLogger("peewee").setLevel(logging.INFO)
    # Every command that takes --json prints its failure as JSON on stdout too.
    as_json = bool(getattr(args, "json", False))
    try:
        if args.command == "tools":
            return tools_command(args)
        if args.command == "call":
            return call_command(args)
        if args.command == "search":
            return search_command(args)
        if args.command == "demo":
            from ..demo.run import run_demo

            return run_demo(out=sys.stdout)
        if args.command == "doctor":
            return doctor_command(args)
        if args.command == "completion":
            return completion_command(args)
        if args.command == "serve":
            return serve_command(args)
        if args.command == "open":
            return open_command(args)
        if args.command == "store":
            return store_command(args)
        if args.command == "approve":
            return approve_command(args)
        if args.command == "tasks":
            return tasks_command(args)
        if args.command == "import":
            return import_command(args)
        if args.command == "export":
            return export_command(args)
        if args.command in ADMIN:
            return admin_command(args)
        return failure(Usage(f"a command is required: tools, call, search, demo, doctor, servers, add, edit, remove, enable, disable, "
                             f"sign-in, sign-out, extension, approve, tasks, import, export, serve, open, store or completion (see {PROG} --help)"),
                       EXIT_USAGE)
    except BrokenPipeError:
        raise  # main ends the run quietly
    except Usage as exc:
        return failure(exc, EXIT_USAGE, as_json=as_json)
    except AlbedoError as exc:
        return failure(exc, exit_code(exc), as_json=as_json)
    except KeyboardInterrupt as exc:
        return failure(exc, 130, message="interrupted", as_json=as_json)
    except (pykka.Timeout, pykka.ActorDeadError) as exc:  # the demo waits on the session's own futures
        error = SessionClosed(CLOSED) if isinstance(exc, pykka.ActorDeadError) else \
            SessionTimedOut("the MCP session did not answer in time; try again")
        return failure(error, exit_code(error), as_json=as_json)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if args.verbose:
            logging.getLogger(__name__).exception("unexpected error")
        return failure(exc, EXIT_TOOL_ERROR, as_json=as_json,
                       message=f"unexpected error: {type(exc).__name__}: {exc} (run with --verbose for details)")

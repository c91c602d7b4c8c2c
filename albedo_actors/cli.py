"""``albedo-mcp``: the admin command line (``python -m albedo_actors`` is the same program).

::

    albedo-mcp [--home DIR] tools [--json]
    albedo-mcp [--home DIR] call NAME [--args JSON] [--json]
    albedo-mcp demo

Exit codes: 0 done; 1 the tool reported ``isError`` (or the server answered the call
with a JSON-RPC error); 2 usage or configuration error; 3 unavailable (the call did
not run); 4 unknown outcome (the call was sent and the connection was lost, or the
answer was not valid MCP); 5 timed out. Warnings go to stderr, one line each, naming
the server. No traceback reaches the user unless ``--verbose`` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Sequence

from . import __version__
from .config import load, resolve_home
from .errors import (
    AlbedoError,
    ConfigError,
    ProtocolViolation,
    RemoteError,
    TimedOut,
    Unavailable,
    UnknownOutcome,
)
from .session import Session, advertised_name

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_UNKNOWN_OUTCOME = 4
EXIT_TIMED_OUT = 5

PROG = "albedo-mcp"


class _Usage(Exception):
    """A usage problem the user can fix; exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit; we report one line
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Connect to configured MCP servers; list and call their tools.")
    parser.add_argument("--home", help="configuration directory (default: $ALBEDO_HOME, else ~/.albedo)")
    parser.add_argument("--verbose", "-v", action="store_true", help="log what happens to stderr")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    tools = commands.add_parser("tools", help="list the tools every enabled server advertises")
    tools.add_argument("--json", action="store_true", help="print a JSON array")
    call = commands.add_parser("call", help="call one tool by advertised name or SERVER/TOOL")
    call.add_argument("name", metavar="NAME", help="an advertised name (mcp_SERVER_TOOL) or SERVER/TOOL")
    call.add_argument("--args", default=None, metavar="JSON", help="the arguments, a JSON object")
    call.add_argument("--json", action="store_true", help="print the CallToolResult as JSON")
    commands.add_parser("demo", help="show what albedo_actors does, on the bundled demo server")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    try:
        args = _parser().parse_args(argv)
    except _Usage as exc:
        _error(f"{exc} (see {PROG} --help)")
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.CRITICAL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("pykka").setLevel(logging.CRITICAL)
    try:
        if args.command == "tools":
            return _tools(args)
        if args.command == "call":
            return _call(args)
        if args.command == "demo":
            from .demo.run import run_demo

            return run_demo(out=sys.stdout)
        _error(f"a command is required: tools, call or demo (see {PROG} --help)")
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
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if args.verbose:
            logging.getLogger(__name__).exception("unexpected error")
        _error(f"unexpected error: {type(exc).__name__}: {exc} (run with --verbose for details)")
        return EXIT_TOOL_ERROR


def exit_code(exc: AlbedoError) -> int:
    """The exit code for an error, as the module docstring lists them."""
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, Unavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, TimedOut):
        return EXIT_TIMED_OUT
    if isinstance(exc, (UnknownOutcome, ProtocolViolation)):
        return EXIT_UNKNOWN_OUTCOME
    if isinstance(exc, RemoteError):
        return EXIT_TOOL_ERROR
    return EXIT_USAGE


def _tools(args: argparse.Namespace) -> int:
    config = load(resolve_home(args.home))
    with Session(config, list(config.enabled), _warn) as session:
        for failure in session.failures.values():
            _warn(f"{failure}; left out")
        tools = session.tools()
    if args.json:
        _print_json([tool.as_json() for tool in tools])
    else:
        for tool in tools:
            summary = " ".join(tool.description.split())
            print(f"{tool.name}\t{summary[:160]}" if summary else tool.name)
    return EXIT_OK


def _call(args: argparse.Namespace) -> int:
    arguments = _arguments(args.args)
    config = load(resolve_home(args.home))
    if "/" in args.name:
        server_name, _, tool = args.name.partition("/")
        candidates = [config.server(server_name)]
    else:
        candidates = [s for s in config.servers if args.name.startswith(f"mcp_{s.name}_")]
        if not candidates:
            raise _Usage(f"no configured server advertises {args.name!r}; use an advertised name from '{PROG} tools' or SERVER/TOOL")
        tool = None
    for server in candidates:
        if not server.enabled:
            raise _Usage(f"server {server.name!r} is disabled in extensions.json")
    with Session(config, candidates, _warn) as session:
        if not session.catalogues:
            raise next(iter(session.failures.values()))
        matches = [
            (name, entry["name"])
            for name, catalogue in session.catalogues.items()
            for entry in catalogue.tools
            if (entry["name"] == tool if tool is not None else advertised_name(name, entry["name"]) == args.name)
        ]
        if not matches:
            raise _Usage(f"no tool {args.name!r}; '{PROG} tools' lists the tools")
        if len(matches) > 1:
            raise _Usage(f"{args.name!r} is ambiguous ({', '.join(f'{s}/{t}' for s, t in matches)}); use SERVER/TOOL")
        server_name, tool = matches[0]
        if not session.handles[server_name].config.tool_enabled(tool):
            raise _Usage(f"tool {tool!r} of server {server_name!r} is disabled in extensions.json")
        result = session.handles[server_name].call_tool(tool, arguments)
    if args.json:
        _print_json(result)
    else:
        _print_result(result)
    if result.get("isError") is True:
        _error(f"server {server_name!r}: tool {tool!r} reported an error")
        return EXIT_TOOL_ERROR
    return EXIT_OK


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
            print(block.get("text", ""))
        elif kind in ("image", "audio"):
            size = len(block.get("data") or "") * 3 // 4
            print(f"[{kind} {block.get('mimeType', '?')}, about {size} bytes]")
        elif kind == "resource_link":
            print(f"[link {block.get('uri', '?')}]")
        elif kind == "resource":
            resource = block.get("resource") if isinstance(block.get("resource"), dict) else {}
            print(resource["text"] if isinstance(resource.get("text"), str) else f"[resource {resource.get('uri', '?')}]")
        else:
            print(f"[{kind} content]")
        printed = True
    if not printed and "structuredContent" in result:
        _print_json(result["structuredContent"])


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

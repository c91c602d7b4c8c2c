"""``tools``, ``call`` and ``search``: the runtime a command line session runs on, over the store a host uses."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping, cast

from ..catalogue.composition import Composition, perform
from ..catalogue.naming import Advertised, advertised_name, server_prefix
from ..catalogue.schemas import check_arguments
from ..catalogue.search import SEARCH_SCHEMA, SEARCH_TOOL, search_arguments
from ..config import McpConfig, ServerConfig, load, resolve_home
from ..errors import EXIT_OK, EXIT_TOOL_ERROR, ConfigError, StoreError, Unavailable
from ..runtime import Runtime
from ..wire.deadline import Deadline
from ..wire.text import printable
from .arguments import Pair, closest, coerce, parse_pairs, problem_line, signature
from .options import PROG, Usage
from .output import error_line, note, out, print_json, print_result, warn

if TYPE_CHECKING:
    from ..store import Store


def tools_command(args: argparse.Namespace) -> int:
    """``tools [SERVER ...] [--json] [--refresh] [--model [--budget N]]``."""
    config = load(resolve_home(args.home))
    chosen = named_servers(config, args.servers)
    model = args.model or args.budget is not None
    # With a store, a server with a saved catalogue is listed from it without being
    # started (its first call dials it); the others are dialled, all at once. --refresh
    # dials every one, and saves what it finds.
    with store_for(args, config.home) as store:
        runtime_store = cast("Store", Redialling(store)) if args.refresh and store is not None else store
        with admin_runtime(dataclasses.replace(config, servers=chosen), runtime_store) as runtime:
            if args.budget is not None:
                runtime.session.set_budget(args.budget)
            composition = runtime.composition()
            for warning in (*composition.warnings, *composition.operation_warnings):
                warn(warning)
            tools = composition.model_operations_shared() if model else composition.operations
    if getattr(args, "held", False):
        from .trust import print_held

        print_held(composition.on_hold, args.json)
        return EXIT_OK
    for line in held_notes(composition):
        warn(line)
    saved = composition.saved_at
    if model:
        list_model(composition, tools, args.json)
        return EXIT_OK
    if args.json:
        listed = [{**tool.as_json(), "savedAt": iso_time(saved.get(tool.server))} for tool in tools]
        listed += [held_entry(hold, saved.get(hold.server)) for holds in composition.on_hold.values() for hold in holds
                   if not hold.instructions]
        print_json(listed)
        return EXIT_OK
    schemas = Schemas(composition)
    for tool in tools:
        summary = " ".join(tool.description.split())
        shown = signature(tool.server, tool.operation, schemas.of(tool))
        out(f"{shown}\t{printable(summary, limit=160)}" if summary else shown)
    for holds in composition.on_hold.values():
        for hold in holds:
            if not hold.instructions:
                what = "new" if hold.kind == "new" else f"changed {', '.join(hold.changes)}"
                out(printable(f"{hold.server}/{hold.tool}\t[held: {what}; not offered until approved]", one_line=True))
    if saved:
        note(catalogue_ages(saved, time.time()))
    return EXIT_OK


def held_notes(composition: Composition) -> list[str]:
    """One stderr line per server with held tools (or instructions), naming them."""
    lines = []
    for server, holds in sorted(composition.on_hold.items()):
        named = ", ".join(repr(hold.tool) for hold in holds)
        lines.append(printable(f"server {server!r}: held until approved (changed or new since it was trusted): {named}; "
                               f"'{PROG} tools --held' shows what changed, '{PROG} approve {server} TOOL ...' approves",
                               one_line=True))
    return lines


def held_entry(hold: Any, saved: float | None) -> dict[str, Any]:
    """A held tool in ``tools --json``: its advertised name, ``"held": true`` and what changed."""
    description = hold.new.get("description")
    return {"name": advertised_name(hold.server, hold.tool), "server": hold.server, "kind": "tool", "operation": hold.tool,
            "description": description if isinstance(description, str) else "", "held": True, "change": hold.kind,
            "changes": list(hold.changes), "savedAt": iso_time(saved)}


def catalogue_ages(saved: Mapping[str, float], now: float) -> str:
    """One stderr line, however many servers: which were listed from saved catalogues,
    and how old those are (a few by name; many as a range, the oldest named)."""
    if len(saved) == 1:
        [(name, when)] = saved.items()
        return f"server {name!r}: listed from its catalogue saved {age(now - when)}; '{PROG} tools --refresh' dials it"
    if len(saved) <= 5:
        each = ", ".join(f"{name!r} saved {age(now - saved[name])}" for name in sorted(saved))
        return f"listed from saved catalogues: {each}; '{PROG} tools --refresh' dials them"
    oldest = min(saved, key=lambda name: (saved[name], name))
    newest = max(saved.values())
    return (f"{len(saved)} servers listed from saved catalogues, saved from {age(now - newest)} to "
            f"{age(now - saved[oldest])} (the oldest: {oldest!r}); '{PROG} tools --refresh' dials them, "
            f"'{PROG} tools --json' gives each one's savedAt")


def named_servers(config: McpConfig, names: list[str] | None) -> tuple[ServerConfig, ...]:
    """The configured servers ``names`` picks (all of them when it names none).

    Raises:
        ConfigError: a name is not configured (the nearest one suggested).
        Usage: a named server is disabled.
    """
    if not names:
        return config.servers
    picked = []
    for name in dict.fromkeys(names):
        server = configured(config, name)
        if not server.enabled:
            raise Usage(f"server {name!r} is disabled in extensions.json; '{PROG} enable {name}' turns it on")
        picked.append(server)
    return tuple(picked)


def configured(config: McpConfig, name: str, tool: str | None = None) -> ServerConfig:
    """``config.server(name)``, suggesting the nearest configured name when there is none.

    Raises:
        ConfigError: no server is named ``name``.
    """
    try:
        return config.server(name)
    except ConfigError as exc:
        near = closest(name, (s.name for s in config.servers))
        if near is None:
            raise
        suggestion = f"{near}/{tool}" if tool is not None else repr(near)
        raise ConfigError(f"{exc}; did you mean {suggestion}?") from None


class Schemas:
    """Each listed operation's inputSchema as its server sent it (the advertised copy may
    be cut, catalogue/naming.py), looked up by name once per catalogue."""

    def __init__(self, composition: Composition) -> None:
        self._composition = composition
        self._tools: dict[str, dict[str, Any]] = {}

    def of(self, item: Advertised) -> Any:
        if item.kind == "tool":
            tools = self._tools.get(item.server)
            if tools is None:
                catalogue = self._composition.catalogues.get(item.server)
                tools = self._tools[item.server] = {} if catalogue is None else {
                    tool["name"]: tool for tool in catalogue.tools if isinstance(tool.get("name"), str)}
            schema = tools.get(item.operation, {}).get("inputSchema")
            if isinstance(schema, dict):
                return schema
        return item.input_schema


def list_model(composition: Composition, offered: tuple[Advertised, ...], as_json: bool) -> None:
    """What the model is offered, under the session's budget: each advertised name with
    the parameters it is offered (the advertised schema), then a note of how many."""
    if as_json:
        print_json([item.as_json() for item in offered])
        return
    for item in offered:
        summary = " ".join(item.description.split())
        shown = signature("", item.name, item.input_schema)
        out(f"{shown}\t{printable(summary, limit=160)}" if summary else shown)
    total = len(composition.operations) + len(composition.overlay_operations)
    budget = composition.usage.budget() if composition.usage is not None else None
    searched = any(item.name == SEARCH_TOOL for item in offered)
    if budget is None:
        note(f"the model is offered all {total} operations (no budget: mcp.advertise.maxTools is not set; "
             f"--budget N sets one for this listing)")
    elif not searched:
        note(f"the model is offered all {total} operations (within the budget of {budget.max_tools})")
    else:
        note(f"the model is offered {len(offered) - 1} of {total} operations and {SEARCH_TOOL}, which finds the "
             f"others (budget {budget.max_tools}: the pinned ones, then the most recently used, then the first listed)")


class Redialling:
    """The store, with no saved catalogue: every server is dialled, and what each one
    lists is saved (``tools --refresh``). Everything else is the store's own."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def load_catalogue(self, server: str) -> None:
        return None

    def load_catalogues(self, servers: Any) -> dict[str, Any]:
        return {}


def age(seconds: float) -> str:
    """``5 minutes ago``, ``3 days ago``: an age in whole units, rounded down."""
    seconds = max(0.0, seconds)
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "less than a minute ago"


def iso_time(when: float | None) -> str | None:
    if when is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def search_command(args: argparse.Namespace) -> int:
    """``search QUERY... [--limit N] [--json]``: the tool search the model's ``mcp_search_tools`` runs."""
    query = " ".join(args.query)
    try:
        query, limit = search_arguments({"query": query, "limit": args.limit})
    except ValueError as exc:
        raise Usage(str(exc)) from None
    config = load(resolve_home(args.home))
    with store_for(args, config.home) as store, admin_runtime(config, store) as runtime:
        composition = runtime.composition()
        for warning in (*composition.warnings, *composition.operation_warnings):
            warn(warning)
        found = composition.search(query, limit)
    if args.json:
        print_json([item.as_json() for item in found])
        return EXIT_OK
    schemas = Schemas(composition)
    for item in found:
        summary = " ".join(item.description.split())
        shown = signature(item.server, item.operation, schemas.of(item)) if item.server else item.name
        out(f"{shown}\t{printable(summary, limit=160)}" if summary else shown)
    if not found:
        note(f"no operation matches {printable(query, one_line=True, limit=80)!r}; try other words")
    return EXIT_OK


def admin_runtime(config: McpConfig, store: Store | None) -> Runtime:
    """The runtime over ``config``'s servers; saved catalogues are not re-dialled in the background.

    The command line's session chooses the extension on (an admin tool works whatever
    the configured default says)."""
    return Runtime(config.home, store, config=config, background=False, enabled=True, watch=False)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86_400:  # NaN and infinities fail too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 and below 86400")
    return value


def call_command(args: argparse.Namespace) -> int:
    # The call's one deadline starts here, before the runtime opens: starting the
    # server, a sign-in and the call itself all end by it.
    args.deadline = Deadline.after(args.timeout) if args.timeout is not None else None
    base = json_arguments(args.args)
    pairs = parse_pairs(args.arguments)
    config = load(resolve_home(args.home))
    if args.name == SEARCH_TOOL:
        return search_call(args, config, coerce(pairs, SEARCH_SCHEMA, base))
    if "/" in args.name:
        server_name, _, tool = args.name.partition("/")
        candidates = [configured(config, server_name, tool)]
        if not candidates[0].enabled:
            raise Usage(f"server {server_name!r} is disabled in extensions.json")
    else:
        # An advertised name carries a hash, so it cannot be split back into server and
        # tool: connect the servers whose prefix fits, then match the name exactly.
        fitting = [s for s in config.servers if args.name.startswith(server_prefix(s.name))]
        if not fitting:
            hint = nearest_server(config, args.name) or f"; name it as SERVER/TOOL, or as '{PROG} tools --json' gives it"
            raise Usage(f"no configured server advertises {args.name!r}{hint}")
        candidates = [s for s in fitting if s.enabled]
        if not candidates:
            raise Usage(f"server {fitting[0].name!r} is disabled in extensions.json")
    # Only the servers the name can mean are prepared (and so started).
    chosen_config = dataclasses.replace(config, servers=tuple(candidates))
    with store_for(args, config.home) as store:
        if store is not None:
            # Credentials that cannot be read are their server's store error (exit 7, the
            # line says what to do) when no other server can be the one called.
            stored = store.get_credentials_of([s.name for s in candidates])
            unreadable = [value for value in stored.values() if isinstance(value, StoreError)]
            if unreadable and len(unreadable) == len(candidates):
                raise unreadable[0]
        return call_in(args, chosen_config, store, base, pairs)


def nearest_server(config: McpConfig, name: str) -> str:
    """``; did you mean server 'x'? ...`` for an advertised name whose server part is a
    typo of a configured server's, else nothing."""
    prefixes = {server_prefix(s.name): s.name for s in config.servers}
    near = closest(name, (prefix + name[len(prefix):] for prefix in prefixes))
    if near is None:
        return ""
    server = next(server for prefix, server in prefixes.items() if near.startswith(prefix))
    return f"; did you mean server {server!r}? ('{PROG} tools {server}' lists its operations)"


def call_in(args: argparse.Namespace, chosen_config: McpConfig, store: Store | None, base: dict[str, Any] | None,
            pairs: list[Pair]) -> int:
    with admin_runtime(chosen_config, store) as runtime:
        session = runtime.composition()
        if not session.catalogues:
            name, reason = next(iter(session.left_out.items()))
            if name in session.misconfigured:
                raise ConfigError(f"server {name!r}: {reason}")
            raise Unavailable(name, reason)
        for warning in session.warnings:
            warn(warning)
        # The one resolver (Composition.resolve): the operation and its client, both of this session.
        chosen, handle = resolve(session, args)
        schema = Schemas(session).of(chosen)
        arguments = coerce(pairs, schema, base)
        if chosen.kind == "tool" and not args.no_check:
            # Checked against the tool's own inputSchema before anything is sent.
            checked = check_arguments(schema, arguments, args.deadline.at if args.deadline else None)
            if checked.problems:
                raise Usage(problem_line(chosen.server, chosen.operation, checked.problems[0], schema, arguments))
            if checked.unchecked is not None:
                warn(f"server {chosen.server!r}: tool {chosen.operation!r}: {checked.unchecked}")
        check_operation_arguments(chosen, arguments)
        progress = progress_line(chosen, args.json)
        try:
            # The one call pipeline (catalogue/composition.py): issue 16's output check,
            # ended by the call's deadline (issue 23).
            done = perform(session, chosen, handle, arguments, on_progress=progress, deadline=args.deadline)
        finally:
            if progress is not None:
                progress.clear()  # the reporter has ended: nothing writes after this
        result = done.result
        if done.warning is not None:  # issue 16: one warning line; --json prints the server's JSON alone
            warn(done.warning)
        if done.schema_errors:
            more = " (and more)" if len(done.schema_errors) > 1 else ""
            warn(f"server {chosen.server!r}: tool {chosen.operation!r}: its result does not match its "
                  f"outputSchema: {done.schema_errors[0]}{more}")
    return shown(result, args.json, f"server {chosen.server!r}: tool {chosen.operation!r} reported an error"
                 if chosen.kind == "tool" else None)


def resolve(session: Composition, args: argparse.Namespace) -> tuple[Advertised, Any]:
    """:meth:`Composition.resolve`, with the nearest name suggested for one nobody offers.

    Raises:
        ConfigError, NeedsSignIn, Unavailable: as Composition.resolve.
    """
    name = args.name
    try:
        return session.resolve(name, hidden=args.hidden, listing=f"'{PROG} tools'", hidden_option="--hidden")
    except ConfigError:
        server = name.partition("/")[0] if "/" in name else None
        if (server is not None and server not in session.catalogues) or offered(session, name):
            raise  # a server left out, a tool disabled or hidden: its own line says why
        # Compared without the part every candidate shares (the server), which would make
        # any two names look alike.
        if server is not None:
            near = closest(name.partition("/")[2], [item.operation for item in session.operations if item.server == server])
            near = f"{server}/{near}" if near is not None else None
        else:
            fitting = sorted({server_prefix(item.server) for item in session.operations
                              if name.startswith(server_prefix(item.server))}, key=len, reverse=True)
            near = None
            if fitting:
                prefix = fitting[0]
                rests = {item.name[len(prefix):]: item.name for item in session.operations if item.name.startswith(prefix)}
                found = closest(name[len(prefix):], rests)
                near = rests.get(found) if found is not None else None
        if near is None:
            raise
        listing = f"'{PROG} tools {server}'" if server is not None else f"'{PROG} tools --json'"
        raise ConfigError(f"no MCP operation {name!r}; did you mean {near}? ({listing} lists them)") from None


def offered(session: Composition, name: str) -> bool:
    """Whether any server of ``session`` has an operation ``name`` names (listed or not)."""
    server, _, operation = name.partition("/")
    for listed, catalogue in session.catalogues.items():
        for tool in catalogue.tools:
            tool_name = tool.get("name")
            if not isinstance(tool_name, str):
                continue
            if ("/" in name and listed == server and tool_name == operation) or (
                    "/" not in name and advertised_name(listed, tool_name) == name):
                return True
    return False


def search_call(args: argparse.Namespace, config: McpConfig, arguments: dict[str, Any]) -> int:
    """``call mcp_search_tools query=...``: the search tool the model is offered over its
    budget, answered here as the session answers the model (never sent to a server)."""
    try:
        search_arguments(arguments)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    with store_for(args, config.home) as store, admin_runtime(config, store) as runtime:
        composition = runtime.composition()
        for warning in composition.warnings:
            warn(warning)
        result = composition.call_search(arguments)
    return shown(result, args.json, f"{SEARCH_TOOL} reported an error")


def shown(result: dict[str, Any], as_json: bool, tool_error: str | None) -> int:
    """Print a call's result (its JSON with ``--json``, else as text); the exit code:
    EXIT_TOOL_ERROR with ``tool_error``'s line when the result is a tool error
    (``isError``; None: a result that cannot be one), else EXIT_OK."""
    if as_json:
        print_json(result)
    else:
        print_result(result)
    if tool_error is not None and result.get("isError") is True:
        error_line(tool_error)
        return EXIT_TOOL_ERROR
    return EXIT_OK


class ProgressLine:
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


def progress_line(entry: Advertised, as_json: bool) -> ProgressLine | None:
    """A progress line when stderr is a terminal and the output is not ``--json``."""
    if as_json or entry.kind != "tool" or not (sys.stderr is not None and sys.stderr.isatty()):
        return None
    return ProgressLine(printable(f"{entry.server}/{entry.operation}", one_line=True, limit=80))


def check_operation_arguments(entry: Advertised, arguments: Mapping[str, Any]) -> None:
    """The command line's own word on a read_resource or get_prompt's arguments."""
    if entry.kind == "read_resource":
        uri = arguments.get("uri")
        if not isinstance(uri, str) or set(arguments) - {"uri"}:
            raise Usage('read_resource takes uri=URI (or --args \'{"uri": "..."}\')')
    elif entry.kind == "get_prompt":
        prompt, prompt_arguments = arguments.get("name"), arguments.get("arguments")
        if (
            not isinstance(prompt, str)
            or set(arguments) - {"name", "arguments"}
            or not (prompt_arguments is None or (isinstance(prompt_arguments, dict) and all(isinstance(v, str) for v in prompt_arguments.values())))
        ):
            raise Usage('get_prompt takes name=PROMPT [arguments:=\'{"key": "text"}\'] (or --args \'{"name": "...", "arguments": {...}}\')')


def json_arguments(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Usage(f"--args is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Usage("--args must be a JSON object, e.g. --args '{\"text\": \"hi\"}'")
    return value


@contextlib.contextmanager
def store_for(args: argparse.Namespace, home: str) -> Iterator[Any]:
    """The store (credentials, saved catalogues) for tools/call: the one a host uses.

    ``--database``, else ``$ALBEDO_DATABASE_URL``, else HOME/albedo.db, created (0600,
    in a 0700 home; see :mod:`albedo_actors.safefiles`) when missing, so that the first
    ``tools`` saves the catalogues every later run lists from. ``--no-store``: none.
    """
    if getattr(args, "no_store", False):
        if args.database:
            raise Usage("give --database or --no-store, not both")
        yield None
        return
    url = args.database or os.environ.get("ALBEDO_DATABASE_URL")
    from ..store import open_store

    store = open_store(home, url=url)
    try:
        yield store
    finally:
        store.close()

"""``tools`` and ``call``: the runtime a command line session runs on, over the store a host uses."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator

from ..catalogue.composition import perform
from ..catalogue.naming import Advertised, server_prefix
from ..config import McpConfig, load, resolve_home
from ..errors import EXIT_OK, EXIT_TOOL_ERROR, StoreError, Unavailable
from ..runtime import Runtime
from ..wire.deadline import Deadline
from ..wire.text import printable
from .options import PROG, Usage
from .output import error_line, out, print_json, print_result, warn

if TYPE_CHECKING:
    from ..store import Store


def tools_command(args: argparse.Namespace) -> int:
    config = load(resolve_home(args.home))
    # With a store, a server with a saved catalogue is listed from it without being
    # started (its first call dials it); the others are dialled, all at once.
    with store_for(args, config.home) as store, admin_runtime(config, store) as runtime:
        composition = runtime.composition()
        for warning in (*composition.warnings, *composition.operation_warnings):
            warn(warning)
        tools = composition.operations
    if args.json:
        print_json([tool.as_json() for tool in tools])
    else:
        for tool in tools:
            summary = " ".join(tool.description.split())
            out(f"{tool.name}\t{printable(summary, limit=160)}" if summary else tool.name)
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
    arguments = json_arguments(args.args)
    config = load(resolve_home(args.home))
    if "/" in args.name:
        server_name = args.name.partition("/")[0]
        candidates = [config.server(server_name)]
        if not candidates[0].enabled:
            raise Usage(f"server {server_name!r} is disabled in extensions.json")
    else:
        # An advertised name carries a hash, so it cannot be split back into server and
        # tool: connect the servers whose prefix fits, then match the name exactly.
        fitting = [s for s in config.servers if args.name.startswith(server_prefix(s.name))]
        if not fitting:
            raise Usage(f"no configured server advertises {args.name!r}; use an advertised name from '{PROG} tools' or SERVER/TOOL")
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
        return call_in(args, chosen_config, store, arguments)


def call_in(args: argparse.Namespace, chosen_config: McpConfig, store: Store | None, arguments: dict[str, Any] | None) -> int:
    with admin_runtime(chosen_config, store) as runtime:
        session = runtime.composition()
        if not session.catalogues:
            name, reason = next(iter(session.left_out.items()))
            raise Unavailable(name, reason)
        for warning in session.warnings:
            warn(warning)
        # The one resolver (Composition.resolve): the operation and its client, both of this session.
        chosen, handle = session.resolve(args.name, hidden=args.hidden, listing=f"'{PROG} tools'", hidden_option="--hidden")
        check_operation_arguments(chosen, arguments)
        progress = progress_line(chosen, args.json)
        try:
            # The one call pipeline (catalogue/composition.py): issue 16's output check,
            # ended by the call's deadline (issue 23).
            done = perform(session, chosen, handle, arguments or {}, on_progress=progress, deadline=args.deadline)
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
    if args.json:
        print_json(result)
    else:
        print_result(result)
    if chosen.kind == "tool" and result.get("isError") is True:
        error_line(f"server {chosen.server!r}: tool {chosen.operation!r} reported an error")
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


def check_operation_arguments(entry: Advertised, arguments: dict[str, Any] | None) -> None:
    """The command line's own word on a read_resource or get_prompt's ``--args``."""
    arguments = arguments or {}
    if entry.kind == "read_resource":
        uri = arguments.get("uri")
        if not isinstance(uri, str) or set(arguments) - {"uri"}:
            raise Usage('read_resource takes --args \'{"uri": "..."}\'')
    elif entry.kind == "get_prompt":
        prompt, prompt_arguments = arguments.get("name"), arguments.get("arguments")
        if (
            not isinstance(prompt, str)
            or set(arguments) - {"name", "arguments"}
            or not (prompt_arguments is None or (isinstance(prompt_arguments, dict) and all(isinstance(v, str) for v in prompt_arguments.values())))
        ):
            raise Usage('get_prompt takes --args \'{"name": "...", "arguments": {"key": "text"}}\'')


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

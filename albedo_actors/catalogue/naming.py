"""Advertised names, bounded schemas and the list of operations a session advertises.

Pure functions over plain data (standard library only); nothing here dials a server.

Names
-----

Every operation a server offers is advertised to the model as::

    mcp_<server>_<operation>_<hash>

built by :func:`advertised_name` with this exact rule:

1. ``<hash>`` is the first 8 hexadecimal digits (lower case) of the SHA-256 of the
   UTF-8 bytes of ``server + "\\0" + operation`` for a tool, and of
   ``server + "\\0" + operation + "\\0" + kind`` for the synthesised
   ``read_resource`` and ``get_prompt`` operations (so a tool that happens to be
   called ``read_resource`` never takes their name). Lone surrogates are encoded with
   ``surrogatepass``. The hash is taken over the names *as the server and the
   configuration spell them*, before any sanitising or truncation: it is stable across
   restarts and hosts, and it keeps two names apart when the same tool is offered by
   two servers or when two tools sanitise (or truncate) to the same text.
2. ``<server>`` and ``<operation>`` are sanitised: every character that is not an ASCII
   letter, an ASCII digit, ``_`` or ``-`` becomes ``_`` (one ``_`` per character).
3. The whole name is at most 64 characters (:data:`MAX_NAME`): the fixed parts
   (``mcp_``, two ``_`` and the 8-digit hash) take 14, leaving 50 for the two sanitised
   parts. When they are longer together, the server part is cut to
   ``max(24, 50 - len(operation))`` characters and the operation to what remains
   (so the server keeps at least its first 24 characters, and the hash is never cut).

The result therefore matches ``^mcp_[A-Za-z0-9_-]*_[0-9a-f]{8}$`` and is at most 64
characters, which is what model providers accept for a tool name.
:func:`server_prefix` gives the text every name of a server starts with, so a name can
be resolved by connecting only the servers whose prefix fits and matching exactly.

Schemas and descriptions
------------------------

An ``inputSchema`` reaches the model only through :func:`bound_schema`: it must be a
JSON object schema (``"type": "object"``, ``properties`` an object and ``required`` a
list of strings when present), at most :data:`MAX_SCHEMA_DEPTH` levels deep, at most
:data:`MAX_SCHEMA_NODES` JSON values and at most :data:`MAX_SCHEMA_BYTES` bytes of
compact JSON. A tool whose schema fails is left out alone, with a warning naming it;
its server's other tools are still advertised. Descriptions are data, never
instructions: they are passed on as text, cut to :data:`MAX_DESCRIPTION` characters.
They keep the server's exact characters (``tools --json`` and the binding give them
as JSON data, which escapes controls itself); wherever one is printed as text, and
in the MCP context lines given to the model, it goes through
:func:`albedo_actors.wire.text.printable`, which escapes control codes, C1 controls,
bidi overrides and lone surrogates visibly.

What the model is offered of a schema that passed is :func:`advertised_schema`'s copy:

1. Its prose is escaped by that rule and cut to :data:`MAX_SCHEMA_PROSE` characters,
   the cut ending in "…". Prose is the value of an annotation keyword that only
   informs (:data:`PROSE_KEYWORDS`: ``title``, ``description``, ``$comment``,
   ``examples`` and the editors' ``markdownDescription``, ``enumDescriptions`` ...),
   and of every ``x-`` extension, wherever it stands as a keyword of a (sub)schema: a
   property that happens to be *named* ``description`` is structure, and so is every
   other string (property names, ``enum`` and ``const`` values, ``default``,
   ``pattern``), kept exact because the model must send them back as the server
   spells them.
2. If that copy is over :data:`MAX_ADVERTISED_SCHEMA` bytes of compact JSON, its prose
   is cut to 128 characters, then left out; the root's ``description`` then says so
   to the model, and the composition warns once naming the tool.
3. If it is still over (the structure alone is too big), the model gets the
   top-level parameters' names and ``type`` and ``required``; past that only
   ``{"type": "object"}``, each with the note and the warning.

A schema within the bounds and without prose to cut is offered as the very object the
server sent. The server's own schema stays in the catalogue for everything else
(``x-mcp-header`` paths, ``--hidden`` calls): nothing validates a call's arguments
against the cut copy.

Resources and prompts
---------------------

A server that lists resources (or resource templates) gets one ``read_resource``
operation, and one that lists prompts one ``get_prompt`` operation; their
descriptions list what the server offers (bounded as above). ``enabledTools`` and
``disabledTools`` apply to every operation by its operation name: a server with
``enabledTools`` advertises ``read_resource``/``get_prompt`` only when they are named
there, and ``disabledTools: ["read_resource"]`` hides it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Final, Literal, Mapping

if TYPE_CHECKING:
    from hashlib import sha256
else:  # SHA-256 without OpenSSL, as random.py takes its sha512: hashlib maps libcrypto (3.5 MiB resident)
    try:
        from _sha256 import sha256  # CPython 3.10, 3.11
    except ImportError:  # pragma: no cover - depends on the interpreter
        try:
            from _sha2 import sha256  # CPython 3.12 and later
        except ImportError:
            from hashlib import sha256

from .model import Catalogue
from .schemas import compile_warning as output_schema_compile_warning
from .schemas import load_problem as output_schema_problem
from ..config import ServerConfig
from ..wire import tasks
from ..wire.text import printable

MAX_NAME = 64
HASH_LENGTH = 8
MIN_SERVER_PART = 24
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 2000
MAX_SCHEMA_BYTES = 64 * 1024
MAX_DESCRIPTION = 1024
# What the model is offered of one inputSchema (advertised_schema). The real tool lists
# in tests/fixtures (npm server-everything, server-filesystem, the SDK's server) have
# schemas of at most 648 bytes and prose strings of at most 161 characters, so none
# loses anything; 8 KiB is about 2,000 tokens, twice what a description may take, and
# twice the 4 KiB at which another client drops a schema whole.
MAX_SCHEMA_PROSE = 512
MAX_ADVERTISED_SCHEMA = 8 * 1024
_PROSE_STEPS = (MAX_SCHEMA_PROSE, 128, 0)  # 0: left out

# Annotation keywords whose values only inform (JSON Schema 2020-12 meta-data section 9
# and core section 8.3; VS Code's and ajv's description extensions), and every "x-".
PROSE_KEYWORDS: Final = frozenset({
    "title", "description", "$comment", "examples",
    "markdownDescription", "enumDescriptions", "markdownEnumDescriptions", "enumNames", "enumTitles",
    "deprecationMessage", "errorMessage",
})
# Keywords whose value is data, never a schema: not walked, kept exact.
_DATA_KEYWORDS = frozenset({"enum", "const", "default"})
# Keywords whose value maps names to subschemas: the names are structure.
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})

READ_RESOURCE: Final = "read_resource"
GET_PROMPT: Final = "get_prompt"

Kind = Literal["tool", "read_resource", "get_prompt"]

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_\-]")
_PLAIN = frozenset({str, int, float, bool, type(None)})  # JSON's plain values, by exact type
# json.dumps with these options, made once (json.dumps builds an encoder per call).
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_FIXED = len("mcp_") + 1 + 1 + HASH_LENGTH  # mcp_ <server> _ <operation> _ <hash>
_BUDGET = MAX_NAME - _FIXED  # 50: for the sanitised server and operation together


class InvalidSchema(ValueError):
    """An inputSchema that is not a JSON object schema."""


class SchemaTooLarge(ValueError):
    """An inputSchema over the depth, node or size bound."""


def sanitise(text: str) -> str:
    """``text`` with every character but ASCII letters, digits, ``_`` and ``-`` as ``_``."""
    return _NOT_ALLOWED.sub("_", text)  # one "_" per character (code point), lone surrogates too


def name_hash(server: str, operation: str, kind: Kind = "tool") -> str:
    key = server + "\0" + operation if kind == "tool" else server + "\0" + operation + "\0" + kind
    return sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]


def advertised_name(server: str, operation: str, kind: Kind = "tool") -> str:
    """``mcp_<server>_<operation>_<hash>``, by the rule in the module docstring."""
    server_part, operation_part = sanitise(server), sanitise(operation)
    if len(server_part) + len(operation_part) > _BUDGET:
        server_part = server_part[: max(MIN_SERVER_PART, _BUDGET - len(operation_part))]
        operation_part = operation_part[: _BUDGET - len(server_part)]
    return f"mcp_{server_part}_{operation_part}_{name_hash(server, operation, kind)}"


def server_prefix(server: str) -> str:
    """What every advertised name of ``server`` starts with.

    ``mcp_<sanitised server>_`` when the server part is never cut (at most 24
    characters), else ``mcp_`` and its first 24 sanitised characters.
    """
    part = sanitise(server)
    return f"mcp_{part}_" if len(part) <= MIN_SERVER_PART else f"mcp_{part[:MIN_SERVER_PART]}"


def bound_schema(schema: Any) -> dict[str, Any]:
    """Return ``schema`` unchanged if it is a bounded JSON object schema.

    Walks it with an explicit stack (no recursion, so a deep schema cannot exhaust
    the interpreter's stack). Raises:
        InvalidSchema: not an object schema, or not plain JSON.
        SchemaTooLarge: deeper than MAX_SCHEMA_DEPTH, more than MAX_SCHEMA_NODES
            values, or more than MAX_SCHEMA_BYTES of compact JSON.
    """
    return _bounded(schema)[0]


def _bounded(schema: Any) -> tuple[dict[str, Any], int, str]:
    """:func:`bound_schema`, the schema's size in bytes of compact JSON, and that JSON."""
    if not isinstance(schema, dict):
        raise InvalidSchema(f"inputSchema is a {_json_type(schema)}, not an object")
    if schema.get("type") != "object":
        raise InvalidSchema('inputSchema is not an object schema (its "type" is not "object")')
    if "properties" in schema and not isinstance(schema["properties"], dict):
        raise InvalidSchema('inputSchema "properties" is not an object')
    required = schema.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise InvalidSchema('inputSchema "required" is not a list of names')
    # Only containers go on the stack; their plain values are counted and checked where
    # they stand (a session with hundreds of servers bounds thousands of schemas).
    nodes = 1
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaTooLarge(f"inputSchema is more than {MAX_SCHEMA_DEPTH} levels deep")
        if isinstance(value, dict):
            try:
                "".join(value)  # every key a string (str.join checks them in C)
            except TypeError:
                raise InvalidSchema("inputSchema has a key that is not a string") from None
            items: Any = value.values()
        else:
            items = value
        if not items:
            continue
        nodes += len(items)
        if nodes > MAX_SCHEMA_NODES:
            raise SchemaTooLarge(f"inputSchema has more than {MAX_SCHEMA_NODES} values")
        below = depth + 1
        if below > MAX_SCHEMA_DEPTH:  # its values, plain or not, are one level too deep
            raise SchemaTooLarge(f"inputSchema is more than {MAX_SCHEMA_DEPTH} levels deep")
        for item in items:
            if type(item) in _PLAIN:
                continue
            if isinstance(item, (dict, list)):
                stack.append((item, below))
            elif not isinstance(item, (str, int, float, bool)):
                raise InvalidSchema(f"inputSchema holds a {type(item).__name__}, not JSON")
    try:
        text = _COMPACT.encode(schema)
    except ValueError as exc:
        raise InvalidSchema(f"inputSchema is not valid JSON ({exc})") from None
    size = _text_size(text)
    if size > MAX_SCHEMA_BYTES:
        raise SchemaTooLarge(f"inputSchema is {size} bytes of JSON, over {MAX_SCHEMA_BYTES}")
    return schema, size, text


def _text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON. Raises ValueError: not JSON (NaN)."""
    return _text_size(_COMPACT.encode(value))


# In compact JSON text (ensure_ascii=False), what may stand for a code point printable()
# escapes: json writes C0 controls as \u00XX or \b \f \r (\n and \t are left as they
# are); DEL is raw ASCII; C1, bidi controls and surrogates are not ASCII. Any of them,
# or an escaped quote (which would split the run below), sends a schema the slow way.
_MAY_ESCAPE = ("\\u00", "\\b", "\\f", "\\r", '\\"', "\x7f")
# A run of more than MAX_SCHEMA_PROSE characters without a quote: the only way a string
# that long can stand in JSON text without escaped quotes.
_LONG_RUN = re.compile('[^"]{%d,}' % (MAX_SCHEMA_PROSE + 1))


def _nothing_to_cut(text: str, size: int) -> bool:
    """Whether the schema written as ``text`` is offered as it is: within
    MAX_ADVERTISED_SCHEMA, ASCII with nothing printable() escapes, and no string
    longer than MAX_SCHEMA_PROSE. True is exact; False only says that advertised_schema
    must look (it may find nothing to cut)."""
    if size > MAX_ADVERTISED_SCHEMA or not text.isascii() or any(mark in text for mark in _MAY_ESCAPE):
        return False
    return size <= MAX_SCHEMA_PROSE or _LONG_RUN.search(text) is None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def bound_description(text: Any, limit: int = MAX_DESCRIPTION) -> str:
    """A description as plain text of at most ``limit`` characters ("" if not text)."""
    if not isinstance(text, str):
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_DROP = object()  # a prose value left out


def advertised_schema(schema: dict[str, Any], size: int | None = None) -> tuple[dict[str, Any], str | None]:
    """What the model is offered of ``schema`` (one that passed :func:`bound_schema`),
    by the steps in the module docstring, and why it was reduced (None when at most
    its prose was cut to MAX_SCHEMA_PROSE).

    ``size``: the schema's bytes of compact JSON, when known. ``schema`` itself is
    returned when nothing is cut; it is never changed (a cut copies only the objects
    on the way to what was cut).
    """
    if size is None:
        size = _json_size(schema)
    for limit in _PROSE_STEPS:
        offered = _cut_schema(schema, limit)
        if limit == MAX_SCHEMA_PROSE:
            if offered is schema and size <= MAX_ADVERTISED_SCHEMA:
                return schema, None
            if _json_size(offered) <= MAX_ADVERTISED_SCHEMA:
                return offered, None
            continue
        note = (f"albedo: the descriptions in this schema are cut to {limit} characters to fit "
                f"its {MAX_ADVERTISED_SCHEMA}-byte bound" if limit else
                f"albedo: the descriptions of this schema are left out to fit its {MAX_ADVERTISED_SCHEMA}-byte bound")
        offered = {**offered, "description": note}
        if _json_size(offered) <= MAX_ADVERTISED_SCHEMA:
            how = f"its descriptions are cut to {limit} characters" if limit else "its descriptions are left out"
            return offered, f"its inputSchema is {size} bytes, over the {MAX_ADVERTISED_SCHEMA} the model is given; {how}"
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        properties = {}
    names = {name: ({"type": sub["type"]} if isinstance(sub, dict) and _is_type(sub.get("type")) else {})
             for name, sub in properties.items()}
    minimal: dict[str, Any] = {
        "type": "object", "properties": names,
        "description": f"albedo: only the names and types of this tool's parameters are given, to fit the "
                       f"{MAX_ADVERTISED_SCHEMA}-byte bound of its schema",
    }
    required = [name for name in schema.get("required") or () if name in names]
    if required:
        minimal["required"] = required
    if _json_size(minimal) <= MAX_ADVERTISED_SCHEMA:
        return minimal, (f"its inputSchema is {size} bytes, over the {MAX_ADVERTISED_SCHEMA} the model is given even "
                         f"without its descriptions; only its parameters' names and types are given")
    return ({"type": "object", "description": f"albedo: this tool's parameters are not given: even their names "
                                              f"are over the {MAX_ADVERTISED_SCHEMA}-byte bound of its schema"},
            f"its inputSchema is {size} bytes, over the {MAX_ADVERTISED_SCHEMA} the model is given even with only "
            f"its parameters' names; its parameters are not given")


def _is_type(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _cut_schema(node: Any, limit: int) -> Any:
    """``node`` (a schema, or a list of schemas) with its prose cut to ``limit``
    characters, or left out when ``limit`` is 0; ``node`` itself when nothing changed.

    Recursive: called only on schemas that passed bound_schema (at most MAX_SCHEMA_DEPTH
    levels, far inside the interpreter's limit)."""
    if isinstance(node, list):
        items = [_cut_schema(item, limit) if isinstance(item, (dict, list)) else item for item in node]
        return node if all(map(_same, items, node)) else items
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    changed = False
    for key, value in node.items():
        if key in PROSE_KEYWORDS or key.startswith("x-"):
            new = _cut_prose(value, limit)
            if new is _DROP:
                changed = True
                continue
        elif key in _DATA_KEYWORDS or not isinstance(value, (dict, list)):
            new = value
        elif key in _NAME_MAPS and isinstance(value, dict):
            new = {name: _cut_schema(sub, limit) for name, sub in value.items()}
            if all(map(_same, new.values(), value.values())):
                new = value
        else:  # a subschema, a list of them (items, anyOf, ...), or an unknown keyword's object
            new = _cut_schema(value, limit)
        changed = changed or new is not value
        out[key] = new
    return out if changed else node


def _same(a: Any, b: Any) -> bool:
    return a is b


def _cut_prose(value: Any, limit: int) -> Any:
    """A prose keyword's value escaped and cut to ``limit`` characters (a string, or
    each string of a list); _DROP when ``limit`` is 0; other values as they are."""
    if not limit:
        return _DROP
    if isinstance(value, str):
        cut = printable(value, limit=limit)
        return value if cut == value else cut
    if isinstance(value, list):
        items = [_cut_prose(item, limit) if isinstance(item, str) else item for item in value]
        return value if all(map(_same, items, value)) else items
    return value


@dataclass(frozen=True)
class Advertised:
    """One operation as the model sees it."""

    name: str
    server: str
    kind: Kind
    operation: str  # the tool's own name for a tool; "read_resource" / "get_prompt"
    description: str
    input_schema: dict[str, Any]

    @property
    def tool(self) -> str:
        return self.operation

    def as_json(self) -> dict[str, Any]:
        """The operation as the command line's and the binding's JSON: the same keys
        (``operation``, never ``tool``: a resource read and a prompt are operations too)."""
        return {
            "name": self.name,
            "server": self.server,
            "kind": self.kind,
            "operation": self.operation,
            "description": self.description,
            "inputSchema": self.input_schema,
        }


READ_RESOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "The URI of the resource to read."}},
    "required": ["uri"],
}

GET_PROMPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The name of the prompt."},
        "arguments": {
            "type": "object",
            "description": "The prompt's arguments, by name.",
            "additionalProperties": {"type": "string"},
        },
    },
    "required": ["name"],
}


# Each synthesised operation gets its own copy of its schema (a caller may change what it
# is given); decoding the JSON text is a deep copy at a fraction of copy.deepcopy's cost.
_SCHEMA_TEXT = {READ_RESOURCE: json.dumps(READ_RESOURCE_SCHEMA), GET_PROMPT: json.dumps(GET_PROMPT_SCHEMA)}


def _listing(header: str, items: list[str]) -> str:
    """``header`` then the items, one per line, cut to MAX_DESCRIPTION with a count."""
    text = header
    for index, item in enumerate(items):
        line = "\n- " + item
        more = f"\n(and {len(items) - index} more)"
        if len(text) + len(line) + len(more) > MAX_DESCRIPTION:
            return bound_description(text + more)
        text += line
    return bound_description(text)


def _one_line(value: Any, limit: int = 120) -> str:
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""


def _resource_description(server: str, catalogue: Catalogue) -> str:
    items = []
    for resource in catalogue.resources:
        uri, title = _one_line(resource.get("uri"), 200), _one_line(resource.get("name") or resource.get("title"))
        if uri:
            items.append(f"{uri} ({title})" if title else uri)
    for template in catalogue.resource_templates:
        uri, title = _one_line(template.get("uriTemplate"), 200), _one_line(template.get("name") or template.get("title"))
        if uri:
            items.append(f"{uri} (template{': ' + title if title else ''})")
    return _listing(f"Read one resource of MCP server {server!r} by URI. It offers:", items)


def _prompt_description(server: str, catalogue: Catalogue) -> str:
    items = []
    for prompt in catalogue.prompts:
        name = _one_line(prompt.get("name"))
        if not name:
            continue
        arguments = prompt.get("arguments")
        arguments = arguments if isinstance(arguments, list) else []
        names = [_one_line(a.get("name"), 40) + ("" if a.get("required") else "?") for a in arguments if isinstance(a, dict) and _one_line(a.get("name"))]
        summary = _one_line(prompt.get("description"), 80)
        items.append(f"{name}({', '.join(names)})" + (f": {summary}" if summary else ""))
    return _listing(f"Get one prompt of MCP server {server!r} by name, with its arguments. It offers:", items)


def advertise(
    catalogues: Mapping[str, Catalogue],
    configs: Mapping[str, ServerConfig],
    warn: Callable[[str], None],
) -> list[Advertised]:
    """What the model sees: each server's enabled tools, then its resource and prompt operations.

    Servers in the order of ``catalogues``, tools in the order the server lists them.
    A tool whose schema is invalid or too large (or whose name is not text, or that is
    listed twice) is left out with a warning naming it; so is an ``enabledTools``
    entry that names nothing the server offers. A server absent from ``configs`` has
    every operation enabled.
    """
    out: list[Advertised] = []
    for server, catalogue in catalogues.items():
        config = configs.get(server)
        depends = None if config is None else (config.enabled_tools, config.disabled_tools, config.tasks)
        built = _BUILT.get(server)
        if built is None or built[0] is not catalogue or built[1] != depends:
            warnings: list[str] = []
            built = (catalogue, depends, tuple(_advertise_one(server, catalogue, config, warnings.append)), tuple(warnings))
            if len(_BUILT) >= _BUILT_LIMIT and server not in _BUILT:
                _BUILT.clear()  # a bound only: a host configures far fewer servers
            _BUILT[server] = built
        out.extend(built[2])
        for warning in built[3]:
            warn(warning)
    return out


# The operations (and warnings) last built for each server name, with the catalogue
# object and what of its configuration they depend on: a catalogue is immutable once
# built, and the saved layer gives the same object for the same saved text
# (catalogue.saved), so a session of hundreds of servers composed again (each start,
# reload, overlay) builds each server's operations once. An entry whose catalogue is
# another object, or whose configuration differs, is built again and replaced.
_BUILT: dict[str, tuple[Catalogue, Any, tuple[Advertised, ...], tuple[str, ...]]] = {}
_BUILT_LIMIT = 4096


def _no_tasks(catalogue: Catalogue, config: ServerConfig | None) -> str:
    """Why a tool that requires a task cannot run as one here ("": it can)."""
    if config is not None and config.tasks == "never":
        return 'the server\'s "tasks" setting is "never"'
    if not tasks.server_runs_tool_tasks(catalogue.capabilities, catalogue.era == "modern"):
        if catalogue.era == "modern":
            return f"the server does not offer the {tasks.EXTENSION} extension"
        return "the server does not declare that it runs tool calls as tasks (capabilities.tasks.requests.tools.call)"
    return ""


def _advertise_one(server: str, catalogue: Catalogue, config: ServerConfig | None,
                   warn: Callable[[str], None]) -> list[Advertised]:
    """:func:`advertise` of one server."""
    out: list[Advertised] = []
    enabled = config.tool_enabled if config is not None else (lambda _name: True)
    offered: set[str] = set()
    # Tools that must run as tasks, when we cannot run them so: left out, not advertised and failed.
    no_tasks = catalogue.task_tools and _no_tasks(catalogue, config)
    for tool in catalogue.tools:
        operation = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(operation, str):
            warn(f"server {server!r}: a tool without a name is left out")
            continue
        if operation in offered:
            warn(f"server {server!r}: tool {operation!r} is listed twice; the first is kept")
            continue
        offered.add(operation)
        if not enabled(operation):
            continue
        if no_tasks and catalogue.task_tools.get(operation) == "required":
            warn(f"server {server!r}: tool {operation!r} left out: it runs only as a task, and {no_tasks}")
            continue
        try:
            schema, size, text = _bounded(tool.get("inputSchema"))
        except ValueError as exc:
            warn(f"server {server!r}: tool {operation!r} left out: {exc}")
            continue
        if not _nothing_to_cut(text, size):
            schema, reduced = advertised_schema(schema, size)
            if reduced is not None:
                warn(f"server {server!r}: tool {operation!r}: {reduced}")
        if "outputSchema" in tool:  # issue 16: checked at its calls (catalogue/schemas.py); a bad one warns here
            problem = output_schema_problem(tool["outputSchema"])
            if problem is not None:
                warn(f"server {server!r}: tool {operation!r}: {problem}")
            elif (line := output_schema_compile_warning(catalogue, operation)) is not None:
                warn(line)
        out.append(
            Advertised(
                name=advertised_name(server, operation),
                server=server,
                kind="tool",
                operation=operation,
                description=bound_description(tool.get("description")),
                input_schema=schema,
            )
        )
    synthesised: tuple[tuple[Kind, bool, Callable[[str, Catalogue], str]], ...] = (
        (READ_RESOURCE, bool(catalogue.resources or catalogue.resource_templates), _resource_description),
        (GET_PROMPT, bool(catalogue.prompts), _prompt_description),
    )
    for kind, listed, describe in synthesised:
        if not listed:
            continue
        offered.add(kind)
        if enabled(kind):
            out.append(
                Advertised(
                    name=advertised_name(server, kind, kind),
                    server=server,
                    kind=kind,
                    operation=kind,
                    description=describe(server, catalogue),
                    input_schema=json.loads(_SCHEMA_TEXT[kind]),
                )
            )
    if config is not None:
        for missing in sorted(set(config.enabled_tools or ()) - offered):
            warn(f"server {server!r}: enabledTools names {missing!r}, which it does not offer")
    return out

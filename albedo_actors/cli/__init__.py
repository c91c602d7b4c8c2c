"""``albedo-mcp``: the admin command line (``python -m albedo_actors`` is the same program).

::

    albedo-mcp [--home DIR] [--database URL | --no-store] tools [SERVER ...] [--json] [--refresh] [--model [--budget N]]
    albedo-mcp [--home DIR] [--database URL | --no-store] call NAME [KEY=VALUE | KEY:=JSON ...] [--args JSON]
               [--json] [--hidden] [--no-check] [--timeout S]
    albedo-mcp [--home DIR] [--database URL | --no-store] search WORD ... [--limit N] [--json]
    albedo-mcp demo
    albedo-mcp [--home DIR] [--database URL] doctor [NAME ...] [--json]
    albedo-mcp completion bash|zsh|fish
    albedo-mcp extension [--json] | extension mcp|editor-mcp on|off

    albedo-mcp servers [--json]
    albedo-mcp add TARGET [--transport http|stdio] [--name NAME] [--disabled]
               [--bearer-token | --bearer-token-env VAR]
               [--header NAME [--header-env VAR]] [--env KEY ...] [--env-from KEY=VAR ...]
               [--oauth-client-id ID [--oauth-client-secret | --oauth-client-secret-env VAR]] [--stdin]
    albedo-mcp edit NAME [--url URL | --command LINE] [the secret options of add]
    albedo-mcp remove NAME | enable NAME | disable NAME
    albedo-mcp sign-in NAME [--timeout S] [--port P] [--no-browser] [--new-client] | sign-out NAME
    albedo-mcp import FILE [--from KIND] [--dry-run] [--disabled] [--stdin]
    albedo-mcp export --to KIND [--output FILE]
    albedo-mcp store new-key [--file PATH] | status | encrypt | rotate-key [--new-key-file PATH] | decrypt

``sign-in`` signs in to an HTTP server that asks for OAuth: it prints the authorization
URL, opens the browser (unless ``--no-browser`` is given or ``$ALBEDO_NO_BROWSER`` is set), and waits for the
browser's redirect to the loopback listener; a callback URL pasted on standard input
(one line) is taken too, whichever comes first. Ctrl-C cancels it. ``--new-client``
registers a new OAuth client instead of reusing the one kept for the authorization server
(a client the user configured is never replaced). ``sign-out`` forgets the server's
tokens, and its next sign-in registers a new client.

``import`` adds the servers of another client's file (Claude, Claude Code, Cursor,
Windsurf, Gemini CLI, VS Code, Codex) one by one as ``add`` does, literal secrets to the
store, ``${env:VAR}``/``${VAR}`` as references (:mod:`albedo_actors.cli.importing`);
``export`` writes the servers in such a format with no secret, each stored credential a
reference to a variable (:mod:`albedo_actors.cli.exporting`).

**One writer.** While ``HOME/service.json`` names a live settings service for the home
(``albedo-mcp serve``, or a host embedding :class:`albedo_actors.service.server.Service`),
``add``, ``edit``, ``remove``, ``enable``, ``disable``, ``extension``, ``sign-in``,
``sign-out`` and ``import`` go through its API (:class:`albedo_actors.service.client.ServiceClient`), so
the host saves the change and its sessions reload; they print the same lines and exit
with the same codes as when they act directly. The secrets they read go in the PATCH
body's ``secrets``, never in argv. ``sign-in`` then starts the service's sign-in (its
loopback listener: ``--port`` is the service's choice), prints and opens the URL, posts a
pasted callback URL to it, and polls its state until it ends or ``--timeout`` passes (then
it cancels it, as Ctrl-C does). A ``service.json`` whose pid is gone is ignored; a service
that refuses the connection (it is stopping) means acting directly, as today; one that
names any address but ``127.0.0.1`` is refused (exit 2) and its token is never sent.
``servers``, ``tools``, ``call`` and ``search`` only read (``tools`` and ``call`` save the
catalogues they discover), and run as always.

``tools`` prints one line per operation, ``SERVER/TOOL(required, [optional])``, a tab
and its description; ``--json`` gives the advertised names (``mcp_<server>_<operation>_<hash>``,
see :mod:`albedo_actors.catalogue.naming`) and when each listed catalogue was saved
(``savedAt``); a server listed from a saved catalogue gets one stderr line saying how
old it is, and ``--refresh`` dials every server and saves what it lists. ``--model``
lists what the model is offered under the budget (``mcp.advertise``, or ``--budget N``).
``search`` runs the model's tool search (:mod:`albedo_actors.catalogue.search`).

``NAME`` is ``SERVER/TOOL`` or an advertised name; a ``read_resource`` or ``get_prompt``
name reads a resource (``uri=...``) or gets a prompt (``name=... arguments='{...}'``);
``mcp_search_tools`` is the search tool, answered here. Each ``KEY=VALUE`` is coerced by
the tool's ``inputSchema`` and the arguments are checked against it before anything is
sent (:mod:`albedo_actors.cli.arguments`; ``--no-check`` skips the check); an unknown
name is refused with the nearest one suggested. ``call`` resolves ``NAME`` as the binding
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
No traceback reaches the user unless ``--verbose`` is given. With ``--json`` (every
command that takes it), a failure is also one JSON object on stdout,
``{"error": {"type", "message", "server", "exit"}}``: the error's class name, the stderr
line without the program's name, the server the error names (else null) and the exit
code. A reader that goes away early (``albedo-mcp tools | head -1``) ends the run
quietly with exit 141, as a program killed by SIGPIPE does (``--help`` too;
``--version`` may exit 0, as argparse drops that write error itself on Python 3.11 and later). ``servers`` on an empty home prints one line on stderr
saying how to add a server, and nothing on stdout (``[]`` with ``--json``).

``completion bash|zsh|fish`` prints argcomplete's completion script for that shell
(:mod:`albedo_actors.cli.completion`); the script completes by running ``albedo-mcp``
with ``$_ARGCOMPLETE`` set, which answers from the parser and the configured servers'
names and exits before anything else runs.

Nothing a server sends reaches the terminal as a control code: every line printed
(lists, results, error lines, warnings, ``--verbose`` logs) goes through
:func:`albedo_actors.wire.text.printable`, which writes C0 controls (but newline and
tab in results; error and warning lines escape those too), DEL, C1 controls, bidi
overrides and lone surrogates as ``repr()`` does (``\\x1b``, ``\\x9b``, ``\\u202e``).
``--json`` output is exact JSON of what the server sent, with those code points as
JSON escapes (:func:`albedo_actors.wire.text.json_text`).

``tools``, ``call`` and ``search`` run on :class:`albedo_actors.runtime.Runtime` over the store a
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
So is a server naming an environment variable that is not set: ``tools`` leaves it out
with one warning naming the server and the variable, and ``call`` of it exits 2 with
that line.

``doctor`` dials every enabled server (or each ``NAME``) now, all at once, each within its
``startupTimeoutMs``, and reports its state (``ok``, ``down``, ``needs_sign_in``,
``misconfigured``, ``off``), era and version, counts, time to ready, the error line and
a stdio server's redacted stderr tail, its auth and whether its saved catalogue is
current (see :mod:`albedo_actors.cli.doctor`); it saves the catalogues it discovers and
the states it saw, which ``servers`` then shows with when (and says when a saved
catalogue or a state seen is of a configuration that has changed since). It exits 0
when every server it checked is ``ok``, else 3.

``extension`` lists each extension's default for every session (the top-level
``enabled`` object of extensions.json: ``mcp`` off and ``editor-mcp`` on unless set);
``extension mcp on`` (or ``off``; ``editor-mcp`` likewise) changes it through
:mod:`albedo_actors.settings`. A session's own choice still overrides it.
"""

from __future__ import annotations

from .entry import main
from .options import PROG

__all__ = ["PROG", "main"]

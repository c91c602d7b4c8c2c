"""The admin commands: servers, add, edit, remove, enable, disable, extension, sign-out, directly or through a running settings service."""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from ..config import OWN_VARIABLE, own_variable, resolve_home
from ..errors import EXIT_OK, ConfigError, StoreError
from .options import PROG, Usage, place_options
from .output import note, out, print_json, warn
from .signin import sign_in, sign_in_through

if TYPE_CHECKING:
    from ..service.client import ServiceClient
    from ..settings import ServerChanges, Settings, SettingsPort

_SECRETS_HELP = (
    "secrets are never taken from the command line: each is read without echo from the terminal, "
    "or as one line of standard input (order: bearer token, the --header values as given, the --env values as given, "
    "OAuth client secret)"
)


def admin_parsers(commands: Any) -> None:
    def admin(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        place_options(sub)
        return sub

    def secrets(sub: argparse.ArgumentParser) -> None:
        group = sub.add_argument_group("secrets", _SECRETS_HELP)
        group.add_argument("--bearer-token", action="store_true", help="read a bearer token (HTTP)")
        group.add_argument("--bearer-token-from-stdin", dest="bearer_token", action="store_true", help=argparse.SUPPRESS)
        group.add_argument("--bearer-token-env", metavar="VAR", help="take the bearer token from this variable of your environment")
        group.add_argument("--header", action="append", default=[], metavar="NAME",
                           help="a custom HTTP header, by its NAME only; its value is read like a secret (repeatable)")
        group.add_argument("--header-env", action="append", default=[], metavar="NAME=VAR",
                           help="a custom HTTP header whose value is taken from VAR of your environment (repeatable)")
        group.add_argument("-e", "--env", action="append", default=[], metavar="KEY", help="a KEY=value env entry for a stdio server; the value is read like a secret (repeatable)")
        group.add_argument("--env-from", action="append", default=[], metavar="KEY=VAR", help="an env entry whose value is taken from VAR of your environment (repeatable)")
        group.add_argument("--oauth-client-id", metavar="ID", help="HTTP: an OAuth client registered by hand for signing in ('-' forgets it)")
        group.add_argument("--oauth-client-secret", action="store_true", help="read that client's secret like a secret")
        group.add_argument("--oauth-client-secret-env", metavar="VAR", help="take that client's secret from this variable of your environment")
        group.add_argument("--stdin", action="store_true", help="read the secrets from standard input even on a terminal")

    servers = admin("servers", "list the configured servers (never a secret)")
    servers.add_argument("--json", action="store_true", help="print a JSON array")
    add = admin("add", "add a server; it must connect unless --disabled (else nothing is saved, exit 3)")
    add.add_argument("target", metavar="TARGET", help="the URL (http) or the command line as one shell-quoted string (stdio; no shell runs)")
    add.add_argument("--transport", choices=("http", "stdio"),
                     help="default: http for an http:// or https:// URL, else stdio (a command line)")
    add.add_argument("--name", help="default: suggested from the URL host (mcp.example.com -> example) or the command's package")
    add.add_argument("--disabled", action="store_true", help='save it switched off ("enabled": false); it is not tried')
    secrets(add)
    edit = admin("edit", "change a server's URL, command or secrets; it must connect unless disabled (else exit 3)")
    edit.add_argument("name", metavar="NAME")
    edit.add_argument("--url", help="the new URL (http)")
    edit.add_argument("--command", dest="command_line", metavar="LINE", help="the new command line, one shell-quoted string (stdio)")
    secrets(edit)
    for name, help in (
        ("remove", "delete a server, its credentials, its saved catalogue and the state doctor saw"),
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


ADMIN = ("servers", "add", "edit", "remove", "enable", "disable", "sign-in", "sign-out", "extension")


def auth_text(auth: Any) -> str:
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


def seen_text(seen: Any) -> str:
    """The last column of ``servers``: what doctor saw last, and when."""
    if seen is None:
        return f"not checked yet ({PROG} doctor)"
    text = f"seen {seen.get('state')} " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seen.get("at") or 0))
    if seen.get("configurationChanged"):
        text += ", before its configuration changed"
    return text


def admin_command(args: argparse.Namespace) -> int:
    from ..settings import Settings
    from ..store import open_store

    home = resolve_home(args.home)
    secrets = read_secrets(args) if args.command in ("add", "edit") else None
    if args.command in THROUGH_SERVICE:
        from ..service.client import ServiceClient, ServiceGone, ServiceSilent

        try:
            client = ServiceClient.find(home)
        except ServiceSilent as exc:  # nothing was sent to it
            warn(str(exc))
            client = None
        if client is not None:
            with client:
                try:
                    return through_service(client, home, args, secrets)
                except ServiceGone:
                    # Refused before anything was sent: the service has gone; act directly.
                    logging.getLogger(__name__).info("the settings service of %s has gone; acting directly", home)
    if args.command == "extension":
        if args.extension is None or args.state is None:
            return extension_command(Settings(home, None), args)  # type: ignore[arg-type]  # listing reads extensions.json only
        # A switch bumps the store's revision, so hosts sharing the database hear it
        # (settings_watch); a store that cannot be opened does not stop the switch.
        try:
            switching = open_store(home, url=args.database)
        except StoreError as exc:
            warn(f"{exc}; the switch is saved in extensions.json, and hosts that share only the database "
                  "hear of it with the next change")
            return extension_command(Settings(home, None), args)  # type: ignore[arg-type]
        try:
            return extension_command(Settings(home, switching), args)
        finally:
            switching.close()
    store = open_store(home, url=args.database)
    try:
        settings = Settings(home, store)
        if args.command == "servers":
            views = settings.servers()
            if args.json:
                print_json([view.as_json() for view in views])
            elif not views:
                # On stderr: stdout holds only the list, so `servers | wc -l` counts servers.
                note(f"no servers yet; add one: {PROG} add URL | 'COMMAND LINE'")
            else:
                for view in views:
                    # A server whose credentials cannot be read shows the store's line in their
                    # place (what to do); the listing goes on and exits 0.
                    stored = view.problem or ", ".join(view.credentials) or "no credentials"
                    out(f"{view.name}\t{view.transport}\t{view.state}\t{view.target}\t{stored}\t{auth_text(view.auth)}"
                        f"\t{seen_text(view.last_seen)}")
            return EXIT_OK
        if args.command == "sign-in":
            return sign_in(settings, args)
        return change_command(settings, home, args, secrets)
    finally:
        store.close()


THROUGH_SERVICE = ("add", "edit", "remove", "enable", "disable", "extension", "sign-in", "sign-out")


def through_service(client: ServiceClient, home: str, args: argparse.Namespace, secrets: Any) -> int:
    """The admin command through the service's API: the same checks, output and exit codes.

    The client is a :class:`~albedo_actors.settings.SettingsPort` as :class:`Settings`
    is: each change is one PATCH of a :class:`~albedo_actors.settings.change.Change`,
    which the service applies as a direct save does, after which its sessions reload.
    """
    if args.command == "extension":
        if args.extension is None:
            return print_extensions(client.extensions(), args)
        if args.state is None:
            raise Usage(f"say on or off: {PROG} extension {args.extension} on|off")
        client.set_extension(args.extension, args.state == "on")
        out(f"{args.extension} is {args.state} for every session that does not choose for itself")
        return EXIT_OK
    if args.command == "sign-in":
        return sign_in_through(client, args)
    return change_command(client, home, args, secrets)


def change_command(port: SettingsPort, home: str, args: argparse.Namespace, secrets: Any) -> int:
    """add, edit, remove, enable, disable and sign-out, written once against the port
    (the settings directly, or a running settings service)."""
    from ..settings import ServerSpec, suggest_name

    if args.command == "add":
        transport, spec_kwargs = add_target(args)
        name = args.name or suggest_name(transport, args.target, set(port.names()))
        view = port.add(ServerSpec(name=name, transport=transport, enabled=not args.disabled, **spec_kwargs), secrets)
        out(f"added {view.name} ({view.transport}, {view.state})")
        return EXIT_OK
    if args.command == "edit":
        view = port.edit(args.name, server_changes(args), secrets)
        out(f"saved {view.name} ({view.transport}, {view.state})")
        return EXIT_OK
    if args.command == "remove":
        port.remove(args.name)
        out(f"removed {args.name}")
        return EXIT_OK
    if args.command == "enable":
        view = port.enable(args.name)
        out(f"enabled {view.name} ({view.state})")
        return EXIT_OK
    if args.command == "sign-out":
        port.sign_out(args.name)
        out(f"signed out of {args.name}")
        return EXIT_OK
    view = port.disable(args.name)
    out(f"disabled {view.name}")
    return EXIT_OK


def add_target(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """``add``'s transport (``--transport``, else guessed from TARGET) and its URL or command."""
    from ..settings import guess_transport

    transport = args.transport or guess_transport(args.target)
    if transport == "http":
        return transport, {"url": args.target}
    words = split_command(args.target, "TARGET")
    return transport, {"command": words[0], "args": tuple(words[1:])}


def server_changes(args: argparse.Namespace) -> ServerChanges:
    """What ``edit`` changes: the URL, or the command and its arguments."""
    from ..settings import ServerChanges

    if args.url is not None and args.command_line is not None:
        raise Usage("give --url or --command, not both")
    if args.command_line is not None:
        words = split_command(args.command_line, "--command")
        return ServerChanges(command=words[0], args=tuple(words[1:]))
    return ServerChanges(url=args.url)


def extension_command(settings: Settings, args: argparse.Namespace) -> int:
    """``extension``: list the defaults, or turn one on or off for every session."""
    if args.extension is None:
        defaults = settings.extensions()
    elif args.state is None:
        raise Usage(f"say on or off: {PROG} extension {args.extension} on|off")
    else:
        defaults = settings.set_extension(args.extension, args.state == "on")
        out(f"{args.extension} is {args.state} for every session that does not choose for itself")
        return EXIT_OK
    return print_extensions(defaults, args)


def print_extensions(defaults: dict[str, bool], args: argparse.Namespace) -> int:
    if args.json:
        print_json(defaults)
    else:
        for name, on in sorted(defaults.items()):
            out(f"{name}\t{'on' if on else 'off'}")
    return EXIT_OK


def split_command(line: str, what: str) -> list[str]:
    """:func:`albedo_actors.settings.split_command`, its error a usage error."""
    from ..settings import split_command as split

    try:
        return split(line, what)
    except ConfigError as exc:
        raise Usage(str(exc)) from None


def read_secrets(args: argparse.Namespace) -> Any:
    """Read every secret the options name, in the documented order; never from argv."""
    from ..settings import SecretInput

    if args.bearer_token and args.bearer_token_env:
        raise Usage("give --bearer-token or --bearer-token-env, not both")
    header_env = header_variables(args)
    reader = SecretReader(args.stdin, editing=args.command == "edit")
    bearer = None
    if args.bearer_token_env:
        bearer = from_environment(args.bearer_token_env, "--bearer-token-env")
    elif args.bearer_token:
        bearer = reader.read("bearer token")
    headers: dict[str, str] = {}
    from_variables = {header.lower() for header in header_env}
    for header in args.header:
        if header.lower() not in from_variables:  # else its value comes from --header-env
            headers[header] = reader.read(f"value of header {header}")
    for header, variable in header_env.items():
        headers[header] = from_environment(variable, "--header-env")
    env: dict[str, str] = {}
    for key in args.env:
        if "=" in key:
            # Say nothing of what follows the "=": it may be a secret.
            raise Usage("--env takes a KEY only; its value is read without echo or from standard input, never from the command line")
        env[key] = reader.read(f"value of env {key}")
    for item in args.env_from:
        key, sep, variable = item.partition("=")
        if not sep or not key or not variable:
            raise Usage("--env-from takes KEY=VAR (VAR: a variable of your environment holding the value)")
        env[key] = from_environment(variable, "--env-from")
    oauth_client = None
    if (args.oauth_client_secret or args.oauth_client_secret_env) and not args.oauth_client_id:
        raise Usage("--oauth-client-secret needs --oauth-client-id ID")
    if args.oauth_client_secret and args.oauth_client_secret_env:
        raise Usage("give --oauth-client-secret or --oauth-client-secret-env, not both")
    if args.oauth_client_id:
        secret = None
        if args.oauth_client_secret_env:
            secret = from_environment(args.oauth_client_secret_env, "--oauth-client-secret-env")
        elif args.oauth_client_secret:
            secret = reader.read(f"secret of OAuth client {args.oauth_client_id}")
        oauth_client = (args.oauth_client_id, secret)
    return SecretInput(bearer_token=bearer, headers=headers, env=env, oauth_client=oauth_client)


def header_variables(args: argparse.Namespace) -> dict[str, str]:
    """Check the --header names (never a value on the command line); the --header-env
    headers, NAME -> VAR. ``--header NAME --header-env VAR`` (one header) is the older form."""
    from ..config import HEADER_NAME

    for header in args.header:
        if not HEADER_NAME.match(header):
            head = header.split(":", 1)[0].strip()
            # Say nothing of what follows the name: it may be a secret.
            named = f" {head}" if head and HEADER_NAME.match(head) else ""
            raise Usage(f"--header takes a NAME only: give --header{named or ' NAME'} and type its value when asked, "
                        f"or pipe it on standard input, or use --header-env{named or ' NAME'}=VAR; "
                        "values are never taken from the command line")
    lowered = [header.lower() for header in args.header]
    if len(set(lowered)) != len(lowered):
        raise Usage("--header names one header twice")
    header_env: dict[str, str] = {}
    for item in args.header_env:
        header, sep, variable = item.partition("=")
        if not sep and len(args.header) == 1 and len(args.header_env) == 1:
            header, variable = args.header[0], item  # --header NAME --header-env VAR
        elif not sep or not header or not variable or not HEADER_NAME.match(header):
            raise Usage("--header-env takes NAME=VAR (NAME: the header; VAR: a variable of your environment holding its value)")
        if header.lower() in {known.lower() for known in header_env}:
            raise Usage(f"--header-env names the {header} header twice")
        header_env[header] = variable
    return header_env


def from_environment(variable: str, option: str) -> str:
    if own_variable(variable):  # the store key must not become a server's stored secret
        raise Usage(f"{option}: ${variable} is {OWN_VARIABLE}")
    value = os.environ.get(variable)
    if value is None:
        raise Usage(f"{option}: ${variable} is not set")
    return value


class SecretReader:
    """Reads secrets: a prompt without echo on a terminal, else one line of stdin each."""

    def __init__(self, force_stdin: bool, editing: bool) -> None:
        self.interactive = not force_stdin and sys.stdin is not None and sys.stdin.isatty()
        self.hint = " (blank keeps, - removes)" if editing else ""

    def read(self, what: str) -> str:
        if self.interactive:
            return getpass.getpass(f"{what}{self.hint}: ")
        line = sys.stdin.readline() if sys.stdin is not None else ""
        if not line:
            raise Usage(f"standard input ended before the {what}; give one line per secret")
        return line.rstrip("\r\n")

"""``python -m albedo_actors.conformance URL``: our client under the MCP conformance suite.

The suite (installed and run by ``scripts/conformance``) starts a test server for one
scenario and runs this command with the server's URL as the last argument, the
scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for a few scenarios, their data as
JSON in ``MCP_CONFORMANCE_CONTEXT``. ``tests/conformance/SCENARIOS.md`` says what each
scenario's server does and checks.

Every scenario gets the same treatment unless :data:`PLANS` names it: connect (which
discovers tools, resources and prompts), call every tool with arguments built from its
``inputSchema``, read every resource and get every prompt. An elicitation is accepted
with the requested schema's defaults. The exit status is 0 when every step worked, else
1 with one line on stderr; the suite itself judges by its checks, not by this status.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from typing import Any, Callable

from .actors.client import ServerHandle
from .auth.server_auth import ServerAuth
from .actors.refresher import TokenRefresher, refresh_by
from .auth.signin import authorizer, follow_redirect_agent
from .catalogue import Catalogue
from .config import OAuthSettings, ServerConfig
from .errors import AlbedoError
from .store import open_store

TIMEOUT_MS = 10_000  # well inside the suite's 30 s per scenario, so we report before it kills us
# The Client ID Metadata Document URL the suite's reference clients use (basic-cimd checks it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


MAX_DEPTH = 16  # a schema may refer to itself; examples stop there


def example_value(schema: Any, root: dict[str, Any], depth: int = 0) -> Any:
    """A value that fits ``schema``: its default, const or first enum member, else one per type.

    Only same-document ``$ref``s (``#/...``) are followed; a network ``$ref`` is never
    fetched (SEP-2106, scenario json-schema-ref-no-deref).
    """
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return "example"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return example_value(_local_ref(root, ref), root, depth + 1) if ref.startswith("#") else "example"
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return example_arguments(schema, root, depth + 1)
    examples: dict[Any, Any] = {"integer": 1, "number": 1, "boolean": True, "array": [], "null": None}
    return examples.get(kind, "example")


def example_arguments(schema: Any, root: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """Arguments for an object schema: an example value for each required property."""
    if not isinstance(schema, dict):
        return {}
    root = schema if root is None else root
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    return {name: example_value(properties.get(name), root, depth) for name in required if isinstance(name, str)}


def _local_ref(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.lstrip("#").split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, dict) else None
    return node


def accept_with_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """Elicitation handler: accept, answering every field that has a default with it (SEP-1034)."""
    schema = params.get("requestedSchema") or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    content = {
        name: field["default"]
        for name, field in (properties or {}).items()
        if isinstance(field, dict) and "default" in field
    }
    return {"action": "accept", "content": content}


# -- what to do in a scenario ----------------------------------------------------------

Plan = Callable[[ServerHandle, Catalogue, dict[str, Any]], list[str]]


def exercise_everything(handle: ServerHandle, catalogue: Catalogue, context: dict[str, Any]) -> list[str]:
    """Call every tool, read every resource, get every prompt; return what failed."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    for tool in catalogue.tools:
        args = example_arguments(tool.get("inputSchema"))
        steps.append((f"tools/call {tool['name']}", functools.partial(handle.call_tool, tool["name"], args)))
    for resource in catalogue.resources:
        steps.append((f"resources/read {resource['uri']}", functools.partial(handle.read_resource, resource["uri"])))
    for prompt in catalogue.prompts:
        args = {a["name"]: "example" for a in prompt.get("arguments") or [] if a.get("required")}
        steps.append((f"prompts/get {prompt['name']}", functools.partial(handle.get_prompt, prompt["name"], args)))
    return _run(steps)


def call_given_tools(handle: ServerHandle, catalogue: Catalogue, context: dict[str, Any]) -> list[str]:
    """http-custom-headers: call exactly the tools and arguments the context names."""
    calls = context.get("toolCalls") or []
    return _run([(f"tools/call {c['name']}", functools.partial(handle.call_tool, c["name"], c.get("arguments"))) for c in calls])


def list_only(handle: ServerHandle, catalogue: Catalogue, context: dict[str, Any]) -> list[str]:
    """json-schema-ref-no-deref: listing is the whole test (its server has no tools/call)."""
    return []


def echo_schema(handle: ServerHandle, catalogue: Catalogue, context: dict[str, Any]) -> list[str]:
    """json-schema-2020-12-preservation: send the focal tool's inputSchema back verbatim."""
    focal = catalogue.tool("json_schema_2020_12_tool")
    if focal is None:
        return ["the server did not list json_schema_2020_12_tool"]
    schema = focal.get("inputSchema")
    return _run([("tools/call json_schema_echo", lambda: handle.call_tool("json_schema_echo", {"schema": schema}))])


PLANS: dict[str, Plan] = {
    "http-custom-headers": call_given_tools,
    "json-schema-ref-no-deref": list_only,
    "json-schema-2020-12-preservation": echo_schema,
}


def _run(steps: list[tuple[str, Callable[[], Any]]]) -> list[str]:
    failures = []
    for label, step in steps:
        try:
            step()
        except AlbedoError as exc:
            failures.append(f"{label}: {exc}")
    return failures


def oauth_settings(context: dict[str, Any]) -> tuple[OAuthSettings, dict[str, str]]:
    """How the scenario's client identifies itself, and the environment holding its secrets.

    A pre-registered client (``client_id``/``client_secret``), the client credentials
    grant (a secret, or an ES256/RS256 ``private_key_pem`` for ``private_key_jwt``), the
    jwt-bearer grant (``valid_jwt``: workload identity), the enterprise grant
    (``idp_id_token``, ``idp_issuer``, ``idp_client_id``: SEP-990), else
    the reference clients' metadata document URL (used when the server supports it,
    else dynamic registration).
    """
    environ = dict(os.environ)
    name = str(context.get("name") or "")
    client_id = context.get("client_id")
    if not isinstance(client_id, str):
        return OAuthSettings(client_metadata_url=CLIENT_METADATA_URL), environ
    grant = "client_credentials" if name.startswith("auth/client-credentials") else "authorization_code"
    # The scenario's secrets go in variables of our own choosing, outside albedo's own
    # ALBEDO_* namespace, which no server configuration may name (config.own_variable).
    secret_var = key_var = None
    if isinstance(context.get("valid_jwt"), str):  # auth/wif-jwt-bearer: the workload's JWT (the valid one)
        environ["MCP_CONFORMANCE_ASSERTION"] = context["valid_jwt"]
        return OAuthSettings(grant="jwt-bearer", client_id=client_id,
                             assertion_env_var="MCP_CONFORMANCE_ASSERTION"), environ
    if isinstance(context.get("idp_id_token"), str):  # auth/enterprise-managed-authorization (SEP-990)
        environ["MCP_CONFORMANCE_ID_TOKEN"] = context["idp_id_token"]
        if isinstance(context.get("client_secret"), str):
            secret_var = "MCP_CONFORMANCE_CLIENT_SECRET"
            environ[secret_var] = context["client_secret"]
        endpoint = context.get("idp_token_endpoint")
        return OAuthSettings(grant="enterprise", client_id=client_id, client_secret_env_var=secret_var,
                             idp_issuer=str(context.get("idp_issuer") or ""), idp_client_id=str(context.get("idp_client_id") or ""),
                             idp_token_endpoint=endpoint if isinstance(endpoint, str) else None,
                             id_token_env_var="MCP_CONFORMANCE_ID_TOKEN"), environ
    if isinstance(context.get("client_secret"), str):
        secret_var = "MCP_CONFORMANCE_CLIENT_SECRET"
        environ[secret_var] = context["client_secret"]
    if isinstance(context.get("private_key_pem"), str):
        key_var = "MCP_CONFORMANCE_PRIVATE_KEY"
        environ[key_var] = context["private_key_pem"]
    algorithm = context.get("signing_algorithm")
    algorithm = algorithm if isinstance(algorithm, str) else "RS256"
    return OAuthSettings(grant=grant, client_id=client_id, client_secret_env_var=secret_var, private_key_env_var=key_var,
                         signing_algorithm=algorithm), environ


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m albedo_actors.conformance SERVER_URL", file=sys.stderr)
        return 2
    url = argv[-1]  # the suite appends the URL after anything in its --command
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    plan = PLANS.get(scenario, exercise_everything)
    oauth, environ = oauth_settings(context)
    config = ServerConfig(
        name="conformance", type="http", url=url, startup_timeout_ms=TIMEOUT_MS, call_timeout_ms=TIMEOUT_MS,
        oauth=oauth,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="albedo-conformance-") as home:
            store = open_store(home)
            refresher = TokenRefresher.start(store, environ)
            try:
                # The suite's authorization servers approve at once: play the browser by
                # following the redirect (port 0: scenarios run in parallel).
                sign_in = authorizer(store, environ=environ, agent=follow_redirect_agent(), port=0, lifetime=TIMEOUT_MS / 1000)
                auth = ServerAuth(config, store, refresh_by(refresher), authorize=sign_in)
                handle = ServerHandle.start(config, home, handlers={"elicitation": accept_with_defaults}, auth=auth)
                try:
                    failures = plan(handle, handle.connect(), context)
                finally:
                    handle.stop()
            finally:
                refresher.stop(timeout=10)
                store.close()
    except AlbedoError as exc:  # from start, connect or stop: the plan reports its own steps
        failures = [f"connect: {exc}"]
    except Exception as exc:  # a bug of ours; still one line for the suite's log
        failures = [f"{type(exc).__name__}: {exc}"]
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        print(f"conformance {scenario or '?'}: {failures[0]}{more}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

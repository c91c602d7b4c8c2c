"""What a host loads: the code that one job needs loads when that job first runs.

Every test runs a fresh interpreter (``sys.executable -c``), because a module this
suite has imported already cannot show up as newly loaded in the test process. The
child prints JSON: the watched modules loaded at each step, and what its call answered.

- Importing ``albedo_actors.runtime`` and ``albedo_actors.binding``, and a stdio-only
  host's whole first call (``Runtime`` without a store, a ``ServerHandle``), load none
  of requests, urllib3, sseclient, jwt, cryptography, werkzeug, waitress, peewee, nor
  the standard library's heavy parts only one job needs (asyncio, http.client, ssl,
  OpenSSL's hashlib), nor our HTTP and OAuth modules.
- A host with its store (what the host of docs/python-api.rst does) loads peewee with the store, and
  still no HTTP or OAuth library.
- The first HTTP server, and the first OAuth token refresh, load their code then, and work.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import albedo_actors
from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(albedo_actors.__file__)))  # the checkout under test
DEMO = os.path.join(PACKAGE_ROOT, "albedo_actors", "demo", "server.py")
CHILD_TIMEOUT = 120.0  # a bound only: each child dials one server

# Loaded only by the job that needs them (the brief's list, then the standard library's).
LIBRARIES = ("requests", "urllib3", "sseclient", "jwt", "cryptography", "werkzeug", "waitress")
HTTP_CODE = ("albedo_actors.transport.http", "albedo_actors.connection.http.link")
OAUTH_CODE = ("albedo_actors.auth.server_auth", "albedo_actors.auth.refresh", "albedo_actors.actors.refresher")
# hashlib's OpenSSL backend stays out only where the interpreter has its own SHA-256.
_OWN_SHA256 = any(importlib.util.find_spec(name) is not None for name in ("_sha256", "_sha2"))
HEAVY_STDLIB = ("asyncio", "http.client", "ssl") + (("_hashlib",) if _OWN_SHA256 else ())
NOT_FOR_STDIO = LIBRARIES + ("peewee",) + HEAVY_STDLIB + HTTP_CODE + OAUTH_CODE
WATCHED = NOT_FOR_STDIO + ("albedo_actors.store.store", "albedo_actors.auth.http", "albedo_actors.auth.addresses")

CHILD = r"""
import json, sys
job = json.loads(sys.argv[1])
watched = job["watched"]
for name in job.get("absent", ()):  # as if not installed: importing it fails
    import importlib.abc

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None, name=name):
            if fullname == name or fullname.startswith(name + "."):
                raise ModuleNotFoundError(f"No module named {fullname!r}")
            return None

    sys.meta_path.insert(0, Absent())
steps = {}

def step(name):
    steps[name] = [m for m in watched if m in sys.modules]

import albedo_actors.runtime, albedo_actors.binding
step("imported")
from albedo_actors.config import McpConfig, ServerConfig
server = ServerConfig(**job["server"])
store = None
answer = None
if job.get("store"):
    from albedo_actors.store import open_store
    store = open_store(job["home"])
    step("store opened")
try:
    if job["via"] == "handle":
        from albedo_actors.actors.client import ServerHandle
        handle = ServerHandle.start(server, job["home"])
        try:
            handle.connect()
            answer = handle.call_tool("echo", {"text": "lazy"})["content"][0]["text"]
            step("called")
        finally:
            handle.stop()
    else:
        from albedo_actors.runtime import Runtime
        config = McpConfig(home=job["home"], servers=(server,))
        with Runtime(job["home"], store, config=config, enabled=True) as runtime:
            step("started")
            record = runtime.mcp().call(server.name + "/echo", text="lazy")
            answer = record.content[0]["text"] if not record.isError else "tool error"
            step("called")
finally:
    if store is not None:
        store.close()
print(json.dumps({"steps": steps, "answer": answer}))
"""


def child_env() -> dict[str, str]:
    """The test's environment, the SQLite store, and this checkout first on the path (run
    from tmp_path, the child imports the package this test imported)."""
    env = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_child(tmp_path, server: dict, via: str = "runtime", store: bool = False,
              watched: tuple[str, ...] = WATCHED, absent: tuple[str, ...] = ()) -> dict:
    home = tmp_path / "child-home"
    home.mkdir(mode=0o700, exist_ok=True)
    job = {"watched": list(watched), "server": server, "via": via, "store": store, "home": str(home),
           "absent": list(absent)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], cwd=str(tmp_path), env=child_env(),
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert done.returncode == 0, f"the child failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def stdio_server() -> dict:
    return {"name": "demo", "type": "stdio", "command": sys.executable, "args": [DEMO, "--era", "dual"]}


def test_importing_the_runtime_and_the_binding_loads_no_job_specific_code(tmp_path):
    code = ("import json, sys\nimport albedo_actors.runtime, albedo_actors.binding\n"
            f"print(json.dumps([m for m in {list(WATCHED)!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=child_env(), capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []


def loaded_by_uuid(watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` the standard library's uuid loads on this interpreter: pykka
    imports uuid, and Python 3.10's uuid imports platform and so subprocess and signal
    (3.11 and later do not), which is no import of ours to defer."""
    code = f"import json, sys, uuid\nprint(json.dumps([m for m in {list(watched)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("via", ["runtime", "handle"])
def test_subprocess_and_signal_load_with_the_first_stdio_launch_and_it_works(tmp_path, via):
    # transport/stdio imports them where a server is launched or ended (issue 14: import time).
    child = run_child(tmp_path, stdio_server(), via=via, watched=("subprocess", "signal"))
    assert child["answer"] == "lazy"
    assert child["steps"]["imported"] == loaded_by_uuid(("subprocess", "signal"))
    assert child["steps"]["called"] == ["subprocess", "signal"]


@pytest.mark.parametrize("via", ["runtime", "handle"])
def test_a_stdio_only_host_calls_without_loading_http_oauth_or_the_store(tmp_path, via):
    child = run_child(tmp_path, stdio_server(), via=via)
    assert child["answer"] == "lazy"
    for name, loaded in child["steps"].items():
        assert [m for m in loaded if m in NOT_FOR_STDIO] == [], f"{name}: {loaded}"


OTEL = ("opentelemetry", "opentelemetry.trace", "opentelemetry.metrics", "opentelemetry.sdk")


@pytest.mark.parametrize("via", ["runtime", "handle"])
def test_without_the_otel_extra_nothing_of_opentelemetry_is_imported_and_calls_work(tmp_path, via):
    child = run_child(tmp_path, stdio_server(), via=via, watched=OTEL, absent=("opentelemetry",))
    assert child["answer"] == "lazy"
    assert child["steps"] and all(loaded == [] for loaded in child["steps"].values()), child["steps"]


def test_with_the_api_installed_it_loads_at_the_first_request_and_no_sdk_is_loaded(tmp_path):
    # The test environment has the API (and the SDK, which no host here configures).
    child = run_child(tmp_path, stdio_server(), via="handle", watched=OTEL)
    assert child["answer"] == "lazy"
    assert child["steps"]["imported"] == []
    assert child["steps"]["called"] == ["opentelemetry", "opentelemetry.trace", "opentelemetry.metrics"]


def test_a_stdio_host_with_its_store_loads_peewee_with_the_store_and_nothing_for_http(tmp_path):
    child = run_child(tmp_path, stdio_server(), store=True)
    assert child["answer"] == "lazy"
    steps = child["steps"]
    assert "peewee" not in steps["imported"] and "albedo_actors.store.store" not in steps["imported"]
    assert "peewee" in steps["store opened"]
    for name, loaded in steps.items():
        assert [m for m in loaded if m in LIBRARIES + HTTP_CODE + ("http.client", "albedo_actors.auth.addresses")] == [], \
            f"{name}: {loaded}"


def test_the_first_http_server_loads_the_http_code_then_and_its_call_works(tmp_path, http_fault):
    served = http_fault(era="dual")
    child = run_child(tmp_path, {"name": "web", "type": "http", "url": served.url})
    assert child["answer"] == "lazy"
    steps = child["steps"]
    assert [m for m in steps["imported"] if m in NOT_FOR_STDIO] == []
    for module in ("http.client", *HTTP_CODE, "albedo_actors.auth.server_auth"):
        assert module in steps["called"], f"{module} was not loaded by the HTTP call: {steps['called']}"
    # No store: no token refresher, no OAuth crypto; the MCP HTTP path needs neither requests nor urllib3.
    assert [m for m in steps["called"] if m in ("jwt", "cryptography", "peewee", "requests", "urllib3", "albedo_actors.actors.refresher")] == []


def test_the_first_token_refresh_in_a_fresh_host_loads_oauth_http_then_and_works(tmp_path, oauth_server):
    served = oauth_server()
    config = ServerConfig(name="guarded", type="http", url=served.url, startup_timeout_ms=15000, call_timeout_ms=15000)
    home = tmp_path / "child-home"
    home.mkdir(mode=0o700)
    store = open_store(str(home))
    try:
        SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    finally:
        store.close()
    served.expire()  # the stored access token is refused from now on: the host must refresh it
    child = run_child(tmp_path, {"name": "guarded", "type": "http", "url": served.url, "startup_timeout_ms": 15000,
                                 "call_timeout_ms": 15000}, store=True)
    assert child["answer"] == "lazy"
    steps = child["steps"]
    for module in ("http.client", "albedo_actors.auth.addresses", "albedo_actors.auth.refresh"):
        assert module not in steps["store opened"], f"{module} was loaded before any OAuth use"
        assert module in steps["called"], f"{module} was not loaded by the refresh: {steps['called']}"
    assert "jwt" not in steps["called"] and "cryptography" not in steps["called"]  # no private key here
    assert served.stats()["token_requests"]["refresh_token"] == 1


def test_the_catalogue_layers_own_sha256_gives_hashlibs_digests():
    # Advertised names and saved fingerprints must not change with the module that hashes.
    import hashlib

    from albedo_actors.catalogue import naming, saved

    for text in ("", "demo\0echo", "ünïcode\0tool\0prompt", "x" * 10_000):
        data = text.encode("utf-8", "surrogatepass")
        assert naming.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert naming.name_hash("demo", "echo") == hashlib.sha256(b"demo\0echo").hexdigest()[:naming.HASH_LENGTH]
    assert saved.sha256 is naming.sha256

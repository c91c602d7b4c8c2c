"""A fleet: hosts sharing one database share saved catalogues."""

import json
import subprocess
import sys
import textwrap

from albedo_actors.catalogue.naming import advertised_name
from helpers import FAULT_SERVER, read_record

# A second host: opens a session that prefers saved catalogues and prints its tools.
HOST = textwrap.dedent(
    """
    import json, sys
    from albedo_actors.config import load
    from albedo_actors.runtime import Runtime
    from albedo_actors.store import open_store

    home, url = sys.argv[1], sys.argv[2] or None
    config = load(home)
    store = open_store(home, url)
    try:
        # background=False: servers with a saved catalogue are listed from it, dialled at first use
        with Runtime(home, store, config=config, enabled=True, background=False, watch=False) as runtime:
            composition = runtime.composition()
            for warning in composition.warnings:
                print(warning)
            print(json.dumps(sorted(tool.name for tool in composition.operations)))
            if len(sys.argv) > 3:  # then call a tool: the first call dials the server
                print(json.dumps(composition.handles["f"].call_tool("echo", {"text": "dialled"})["content"]))
    finally:
        store.close()
    """
)


def write_home(path, record):
    path.mkdir()
    servers = {"f": {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER, "--record", str(record)]}}
    (path / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}))
    return str(path)


def run(args, timeout=60):
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_second_host_starts_from_the_first_hosts_catalogue_without_dialling(tmp_path, backend):
    kind, _home, url = backend
    record = tmp_path / "record"
    first = write_home(tmp_path / "host1", record)
    second = write_home(tmp_path / "host2", record)
    if url is None:  # SQLite: the two hosts share one database file
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    # Host 1 dials the server and saves what it found.
    listed = run([sys.executable, "-m", "albedo_actors", "--home", first, "--database", url, "tools", "--json"])
    names = sorted(tool["name"] for tool in json.loads(listed))
    assert advertised_name("f", "echo") in names
    dials = [m for m in read_record(record) if m.get("method") == "server/discover"]
    assert len(dials) == 1
    # Host 2 advertises the same tools at once: the server was not started again.
    out = run([sys.executable, "-c", HOST, second, url])
    assert json.loads(out.splitlines()[-1]) == names
    assert [m for m in read_record(record) if m.get("method") == "server/discover"] == dials
    # Its first call dials the server.
    out = run([sys.executable, "-c", HOST, second, url, "call"])
    assert "dialled" in out.splitlines()[-1]
    assert len([m for m in read_record(record) if m.get("method") == "server/discover"]) == 2


def test_a_changed_configuration_does_not_use_the_saved_catalogue(tmp_path, backend):
    _kind, _home, url = backend
    record = tmp_path / "record"
    home = write_home(tmp_path / "host", record)
    url = url or f"sqlite:///{tmp_path / 'shared.db'}"
    run([sys.executable, "-m", "albedo_actors", "--home", home, "--database", url, "tools"])
    config = json.loads((tmp_path / "host" / "extensions.json").read_text())
    config["mcp"]["servers"]["f"]["args"].append("--era=legacy")
    (tmp_path / "host" / "extensions.json").write_text(json.dumps(config))
    run([sys.executable, "-c", HOST, home, url])
    # The fingerprint changed, so the second session had to dial.
    assert len([m for m in read_record(record) if m.get("method") == "server/discover"]) == 2

"""``POST /api/mcp/approve`` (issue 26): the service approves what tool integrity holds,
the store's revision moves so running sessions pick it up, and the history says "service"."""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRUST_SERVER = os.path.join(HERE, "servers", "trust_server.py")
LOOKUP = {"name": "lookup", "description": "Look a word up in the dictionary.",
          "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}
NOTES = {"name": "notes", "description": "List notes.", "inputSchema": {"type": "object"}}


def write_state(tmp_path, tools) -> None:
    (tmp_path / "state.json").write_text(json.dumps({"tools": tools, "instructions": None}))


def configure(home, tmp_path, **entry) -> None:
    server = {"type": "stdio", "command": sys.executable,
              "args": [TRUST_SERVER, str(tmp_path / "state.json"), str(tmp_path / "calls.log")], **entry}
    with open(os.path.join(home, "extensions.json"), "w") as file:
        json.dump({"mcp": {"servers": {"dict": server}}, "enabled": {"mcp": True}}, file)


def test_a_configuration_change_keeps_the_hold_and_the_service_approves(svc, tmp_path):
    write_state(tmp_path, [LOOKUP, NOTES])
    configure(svc.home, tmp_path)
    from albedo_actors.cli import main

    assert main(["--home", svc.home, "tools"]) == 0
    write_state(tmp_path, [{**LOOKUP, "title": "Lookup!"}, {**NOTES, "description": "List and send notes."}])
    configure(svc.home, tmp_path, startupTimeoutMs=25_000)  # another fingerprint: dialled again, trust kept
    assert main(["--home", svc.home, "tools"]) == 0
    bad = svc.api("POST", "/api/mcp/approve", json={"server": "dict", "tools": ["nope"]})
    assert bad.status_code == 400 and "not held" in bad.json()["error"]
    assert svc.api("POST", "/api/mcp/approve", json={"server": "dict", "tools": "lookup"}).status_code == 400
    before = svc.store.revision()
    answer = svc.api("POST", "/api/mcp/approve", json={"server": "dict", "tools": ["lookup"]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"server": "dict", "approved": ["lookup"]}
    assert svc.store.revision() > before  # running sessions pick it up at their next turn
    svc.saved.wait(1)
    # The command line goes through the running service.
    assert main(["--home", svc.home, "approve", "dict", "--all"]) == 0
    svc.saved.wait(2)
    approved = {e.name: (e.who, e.changes) for e in svc.store.trust_history("dict") if e.event == "approved"}
    assert approved == {"lookup": ("service", ("title",)), "notes": ("service", ("description",))}
    assert svc.api("POST", "/api/mcp/approve", json={"server": "dict", "tools": None}).json()["approved"] == []

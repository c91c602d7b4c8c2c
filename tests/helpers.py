"""Shared helpers for tests: servers to run, clients to start, schemas to check."""

from __future__ import annotations

import json
import os
import queue
import sys

import jsonschema
import pykka

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FAULT_SERVER = os.path.join(HERE, "servers", "fault_server.py")
SDK_SERVER = os.path.join(HERE, "servers", "sdk_server.py")
SPEC_DIR = os.environ.get("ALBEDO_SPEC_DIR", os.path.join(HERE, "..", "..", "shared", "spec"))


def fault_config(name: str, *flags: str, **overrides) -> ServerConfig:
    """A stdio server entry running the fault server with ``flags``."""
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(FAULT_SERVER, *flags), **overrides)


def schema_validate(version: str, definition: str, instance) -> None:
    """Validate ``instance`` against ``$defs/definition`` of the official schema."""
    with open(os.path.join(SPEC_DIR, f"schema-{version}.json"), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.validate(instance, {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})


def read_record(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Owner(pykka.ThreadingActor):
    """Stands in for a ServerClient's owner: puts every event it is told in a queue."""

    def __init__(self) -> None:
        super().__init__()
        self.events: queue.Queue = queue.Queue()

    def on_receive(self, message):
        self.events.put(message)


class Clients:
    """Starts ServerHandles for a test and stops every one at the end."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.handles: list[ServerHandle] = []

    def start(self, config: ServerConfig, owner=None) -> ServerHandle:
        handle = ServerHandle.start(config, self.home, owner)
        self.handles.append(handle)
        return handle

    def stop_all(self) -> None:
        for handle in self.handles:
            handle.stop()

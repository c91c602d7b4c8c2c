"""The stdio fault server (fault_server.py) with one more switch, for the saved-era tests:

--initialize silent|error    ignore ``initialize`` forever, or answer it with -32601
                             (an error that proves no era), whatever ``--era`` says

Every other flag is fault_server.py's. With ``--era modern`` this is a modern server
that a client holding a stale "legacy" era opens with ``initialize`` first.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fault_server  # noqa: E402
from fault_server import METHOD_NOT_FOUND, FaultServer  # noqa: E402


class InitFaultServer(FaultServer):
    initialize = "answer"

    def handle_request(self, id: str | int, method: str, params: dict) -> dict | None:
        if method == "initialize" and self.initialize == "silent":
            return None
        if method == "initialize" and self.initialize == "error":
            return self.error_message(id, METHOD_NOT_FOUND, "Method not found")
        return super().handle_request(id, method, params)


def main(argv: list[str]) -> None:
    mode = "answer"
    if "--initialize" in argv:
        at = argv.index("--initialize")
        mode = argv[at + 1]
        if mode not in ("silent", "error"):
            sys.exit(f"--initialize must be silent or error, not {mode!r}")
        argv = argv[:at] + argv[at + 2:]
    InitFaultServer.initialize = mode
    fault_server.FaultServer = InitFaultServer  # main() builds the server by this name
    fault_server.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Another local user's listener: an HTTP server on 127.0.0.1 that records everything sent to it.

Run as ``python recording_listener.py [PORT]`` (0 or none: an ephemeral port), under
another user's uid where the test can (``runuser -u nobody``). It prints one JSON line
``{"port": N}`` once it listens, then one JSON line per request it gets:
``{"method", "path", "headers", "body"}`` (body as text, replaced where not UTF-8).

``GET /`` answers with a page that fetches ``/collect`` from its own origin with
``credentials: "include"`` (what a hostile page on another port does to be sent the
cookies a browser keeps for 127.0.0.1), then sets its title to ``collected``. Every
other request gets 404. Standard library only. It runs until its stdin closes.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading

PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>waiting</title></head>
<body><p>another user's page</p>
<script>
fetch("/collect", {credentials: "include", cache: "no-store"})
  .then(() => { document.title = "collected"; }, () => { document.title = "failed"; });
</script></body></html>"""

_lock = threading.Lock()


def _record(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
    line = json.dumps({"method": handler.command, "path": handler.path, "headers": dict(handler.headers.items()),
                       "body": body.decode("utf-8", "replace")})
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20)) if length else b""
        _record(self, body)
        if self.command == "GET" and self.path == "/":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)
            return
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

    def log_message(self, format: str, *args: object) -> None:  # quiet: stdout is the record
        pass


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the test closes our stdin
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()

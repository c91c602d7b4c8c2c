"""FaultHTTPServer whose resumed streams are quiet: every GET carrying ``Last-Event-ID``
is answered with an SSE stream that ends at once, carrying no event.

With ``event_ids=True, cut_stream=N`` on the POST, a legacy client resumes the cut
stream and hears nothing, again and again: what the client's limit on quiet
resumptions (connection/http/exchange.py RESUME_LIMIT) is for. Each such GET is recorded as the event
``quiet_resume``.
"""

from __future__ import annotations

from typing import Any

from servers.fault_http_server import FaultHTTPServer


class QuietResumeServer(FaultHTTPServer):
    def _get(self, h: Any, opts: Any) -> None:
        last_event_id = h.headers.get("Last-Event-ID")
        if last_event_id is None or opts.era == "modern":
            super()._get(h, opts)
            return
        self._record_event("quiet_resume", last_event_id=last_event_id)
        h.start_sse(None, opts.retry)
        h.end_chunks()

"""What every fake engine's HTTP handler shares: JSON answers, and no request log in test output."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class JSONHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON with its length (`_json`) and logs nothing."""

    content_type = "application/json"
    """The Content-Type of a JSON answer (llama-server adds `; charset=utf-8`)."""

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

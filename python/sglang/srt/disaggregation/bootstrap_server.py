"""The prefill server's bootstrap endpoint: its scheduler registers where it takes page lists
(``PUT /route``); a decode server looks that up (``GET /route``) and polls ``GET /health`` as a heartbeat.

It runs in the launching process of a prefill server (``sglang serve --disaggregation-mode prefill``),
on ``--host`` and ``--disaggregation-bootstrap-port``; the state is in memory."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)

MAX_BODY = 1 << 16


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("bootstrap: " + format, *args)

    def _reply(self, status: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body if body is not None else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200)
        elif self.path.split("?")[0] == "/route":
            route = self.server.route
            if route is None:
                self._reply(503, {"error": "the prefill server's scheduler has not registered yet; retry"})
            else:
                self._reply(200, route)
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_PUT(self) -> None:
        if self.path != "/route":
            self._reply(404, {"error": f"no route {self.path}"})
            return
        n = int(self.headers.get("Content-Length") or 0)
        if not 0 < n <= MAX_BODY:
            self._reply(400, {"error": "a JSON body of at most 64 KiB is needed"})
            return
        try:
            body = json.loads(self.rfile.read(n))
            if not isinstance(body, dict) or not isinstance(body.get("endpoint"), str):
                raise ValueError("the body needs an endpoint")
        except ValueError as exc:
            self._reply(400, {"error": str(exc)})
            return
        self.server.route = body
        logger.info("bootstrap: prefill scheduler registered at %s (transfer session %s)", body["endpoint"], body.get("session"))
        self._reply(200)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    route: dict[str, Any] | None = None


class BootstrapServer:
    """``BootstrapServer(host, port)`` serves in a daemon thread until :meth:`close`."""

    def __init__(self, host: str, port: int) -> None:
        try:
            self.httpd = _Server((host, port), _Handler)
        except OSError as exc:
            raise OSError(f"the bootstrap endpoint cannot bind {host}:{port} ({exc}): pick a free --disaggregation-bootstrap-port") from None
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="disagg-bootstrap")
        self.thread.start()
        logger.info("prefill bootstrap endpoint on http://%s:%d", host, port)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""A werkzeug server in a background thread: quiet, and able to reset a connection."""

from __future__ import annotations

import socket
import struct
import sys
import threading

from werkzeug.serving import WSGIRequestHandler, make_server

from .faults import ResetConnection


def untraced() -> None:
    """This thread runs without a trace function. The sandbox is no code of the product's: under the
    tests' coverage (whose tracer each new thread inherits) its serve loop and requests ran several
    times slower, and took CPU from the runs they serve."""
    sys.settrace(None)


class ResettingHandler(WSGIRequestHandler):
    def log_request(self, code="-", size="-"):
        """No line per request: test and benchmark output stays readable."""

    def handle(self):
        untraced()
        try:
            super().handle()
        except ResetConnection:
            self._reset()

    def _reset(self):
        """Abort the connection with a TCP RST and no response at all.

        SO_LINGER with a zero timeout makes close() send RST instead of FIN. The
        socket only really closes once the buffered reader made from it is closed
        too, so close that first; the server's later shutdown()/close() of this
        already-closed socket are harmless no-ops (socketserver ignores the OSError).
        """
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()


class ServerThread:
    def __init__(self, host: str, port: int, app):
        self.server = make_server(host, port, app, threaded=True, request_handler=ResettingHandler)
        self.url = f"http://{host}:{self.server.port}"
        # short poll interval: stop() waits at most this long for the serve loop
        self._thread = threading.Thread(
            target=self._serve,
            name=f"sandbox-{self.server.port}",
            daemon=True,
        )

    def _serve(self) -> None:
        untraced()
        self.server.serve_forever(poll_interval=0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self._thread.join()
        self.server.server_close()

"""Real alert receivers on loopback, port 0: an SMTP server (aiosmtpd) and a webhook (http.server).

Each records the raw bytes of every message it took, so tests can count them and search them for
secrets. Import the fixtures into a test module: `from .alert_servers import smtp_server, webhook`.
"""

import asyncio
import email
import email.policy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.smtp import SMTP


class SmtpServer:
    """aiosmtpd on its own event loop in a thread, bound to 127.0.0.1:0 (the port read back)."""

    def __init__(self):
        self.raw = []  # the DATA of every message, as sent
        self.envelopes = []  # (mail_from, rcpt_tos)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10), "SMTP server did not start"

    def _serve(self, started):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            self.loop.create_server(lambda: SMTP(self, hostname="alerts.test"), "127.0.0.1", 0)
        )
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())
        self.loop.close()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
        self.raw.append(bytes(envelope.original_content or envelope.content))
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"

    def messages(self):
        return [email.message_from_bytes(raw, policy=email.policy.default) for raw in self.raw]

    def texts(self):
        """(subject, plain body) of every message."""
        return [(m["Subject"], m.get_body(("plain", "html")).get_content()) for m in self.messages()]

    def cfg(self, receiver="ops@example.test"):
        """[email]/[smtp] sections that send here, as an operator's layered file would."""
        return {
            "email": {"receiver": receiver, "sender": "portal-export@example.test", "method": "smtp"},
            "smtp": {"host": "127.0.0.1", "port": self.port, "no_tls": "true", "timeout": 5},
        }

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Webhook:
    """An incoming-webhook receiver: mode "ok" answers 200, "500" answers 500, "hang" never answers."""

    def __init__(self, mode="ok"):
        self.mode = mode
        self.raw = []  # every POST body
        self.paths = []
        self.release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's hook name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.raw.append(body)
                hook.paths.append(self.path)
                if hook.mode == "hang":
                    hook.release.wait(30)
                    return
                status = 500 if hook.mode == "500" else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        # The path is the credential, as in Slack's https://hooks.slack.com/services/T../B../XXX
        self.url = f"http://127.0.0.1:{self.port}/services/T0ALERTS/B0ALERTS/s3cretW3bhookT0ken"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def texts(self):
        return [json.loads(body)["text"] for body in self.raw]

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def smtp_server():
    server = SmtpServer()
    yield server
    server.stop()


@pytest.fixture
def webhook():
    """webhook(mode="ok") starts a receiver (stopped after the test)."""
    started = []

    def start(mode="ok"):
        hook = Webhook(mode)
        started.append(hook)
        return hook

    yield start
    for hook in started:
        hook.stop()

"""An authenticating reverse proxy in front of luigid, as the README's nginx site is: HTTP basic
auth, then every request passed on to luigid without the credentials. Real HTTP on loopback, for
the tests that run commands through a proxy; it records what it received."""

import base64
import hmac
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization"}


class AuthProxy:
    def __init__(self, upstream: str, user: str, password: str):
        self.upstream = urlsplit(upstream)
        self.user, self.password = user, password
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.received: list[tuple[str, str, bool]] = []  # (method, path, authorized)
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.handle(self)

            do_POST = do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url_with(self, user: str | None = None, password: str | None = None) -> str:
        """The proxy's URL carrying credentials (percent-encoded, as a URL must carry them)."""
        user = self.user if user is None else user
        password = self.password if password is None else password
        return f"http://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.server.server_address[1]}"

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        authorized = hmac.compare_digest(request.headers.get("Authorization", ""), self.expected)
        with self.lock:
            self.received.append((request.command, request.path, authorized))
        if not authorized:
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="luigid"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | {"authorization", "host"}}
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            conn.request(request.command, request.path, body=body or None, headers=headers)
            answer = conn.getresponse()
            payload = answer.read()
        finally:
            conn.close()
        request.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP | {"content-length"}:
                request.send_header(key, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)

    def paths(self, authorized: bool = True) -> list[str]:
        """The paths received, without the query string, authorized or refused."""
        with self.lock:
            return [urlsplit(path).path for _, path, ok in self.received if ok is authorized]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

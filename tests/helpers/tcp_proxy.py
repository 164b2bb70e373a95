"""A TCP forwarder on a free loopback port, which a test can take down and bring back on the same
port: an object store's endpoint that stops answering for a while, as a network outage or a
restarting gateway makes it, with the store behind it untouched."""

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.port = None
        self.conns = []
        self.lock = threading.Lock()
        self.up()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def up(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port or 0))
        self.port = self.listener.getsockname()[1]
        self.listener.listen(64)
        self.thread = threading.Thread(target=self._accept, args=(self.listener,), daemon=True)
        self.thread.start()

    def down(self):
        """Refuse new connections and cut the open ones."""
        self.listener.close()
        with self.lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self.conns.clear()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

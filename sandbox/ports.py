"""Free loopback ports for the local servers, and a start that survives losing one.

A port found free here is free only until the server binds it: another test worker's server, or
any client's outgoing connection (which takes an ephemeral port from the same range), may take it
first. A server that then exits on "address already in use" is started again on new ports.
"""

import socket
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
ATTEMPTS = 5


class PortTaken(RuntimeError):
    """A server exited because a port picked for it was taken before it bound it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_taken(log: bytes) -> bool:
    """A server's log (of one start) says a port of its was in use: Go's, Python's and nginx's words."""
    return b"address already in use" in log.lower()


def on_free_ports(start: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """`start()` (which picks its ports afresh each call) again while it raises PortTaken."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except PortTaken:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")

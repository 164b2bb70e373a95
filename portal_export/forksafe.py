"""No fork in the middle of a background thread's step.

An orchestrator may fork worker processes from the process whose threads follow the plan and
watch progress (Luigi does, with workers > 1). A fork copies every lock as it is at that instant,
and a lock another thread held stays held in the child for ever: the child hangs the first time
it needs it. Python re-initialises its import lock and logging's handler locks in the child, but
not the lock of a buffered stream such as sys.stderr (a child writing to stderr while another
thread was inside a write hangs), nor any C library's (getaddrinfo's,
OpenSSL's). Luigi guards its own keep-alive ping the same way, with a lock its fork also takes.

Background threads hold `guard` around each step that writes output or talks HTTP; every fork in
the process waits for the step in progress to end (`os.register_at_fork`). Hooks registered later
run first before a fork, so this one runs before logging's takes logging's lock: a step that
logs cannot deadlock against a fork.
"""

from __future__ import annotations

import logging  # noqa: F401 (imported first: its fork hook must be registered before this one)
import os
import threading
from contextlib import AbstractContextManager

_lock = threading.RLock()
# What the threads hold; a test swaps it for a no-op to show what the hooks prevent.
guard: AbstractContextManager[object] = _lock


def _before_fork() -> None:
    _lock.acquire()


def _after_fork() -> None:
    _lock.release()  # in the child too: the forking thread, which holds it, is the child's only thread


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)

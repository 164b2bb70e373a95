"""No fork in the middle of a background thread's step: a lock another thread held stays held in the
child for ever (Python re-initialises its import and logging locks, not a stream's or a C library's,
such as getaddrinfo's or OpenSSL's). Background threads hold `guard` around each step that writes
output or talks HTTP, and every fork waits for it. Hooks registered later run first before a fork:
this one runs before logging's, so a step that logs cannot deadlock a fork."""

from __future__ import annotations

import logging  # noqa: F401 (imported first: its fork hook must be registered before this one)
import os
import threading
from contextlib import AbstractContextManager

_lock = threading.RLock()
# What the threads hold; a test swaps it for a no-op to show what the hooks prevent.
guard: AbstractContextManager[object] = _lock


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    # released in the child too: the forking thread, which holds it, is the child's only thread
    os.register_at_fork(before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release)

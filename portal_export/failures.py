"""A task's failure record: the error code of a region (or day) that failed, kept in the store.

Tasks may run in forked processes, under luigid and on other hosts, where the run's own process
never sees their exceptions: the failing task writes this small object, and whatever summarizes
the run reads it. The record holds the code, a short detail the caller has already scrubbed, when
and on which host it was written (an alert says which host saw what); it is removed when the task
later succeeds.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from .store import Store, read_json, write_json

UNREADABLE: dict[str, Any] = {"code": "UNREADABLE_FAILURE_RECORD", "detail": "", "at": 0.0}


def write_failure(store: Store, key: str, code: str, detail: str = "") -> None:
    """Whole: a reader sees the whole record or none."""
    write_json(store, key, {"code": code, "detail": detail, "at": time.time(), "host": socket.gethostname()})


def read_failure(store: Store, key: str) -> dict[str, Any] | None:
    """The record, or None when there is none; an unreadable one still says something failed."""
    try:
        record = read_json(store, key)
    except (OSError, ValueError):
        return dict(UNREADABLE)
    if record is None:
        return None
    return record if isinstance(record, dict) else dict(UNREADABLE)


def clear_failure(store: Store, key: str) -> None:
    store.delete(key)

"""A task's failure record: the error code of a region (or day) that failed, kept in the store.

Tasks may run in forked processes, under luigid and on other hosts, where the run's own process
never sees their exceptions: the failing task writes this small object, and whatever summarizes
the run reads it. The record holds the code, a short detail the caller has already scrubbed, when
(the writer's clock, for people) and by which run on which host it was written (an alert says
which host saw what); it is removed when the task later succeeds. Whether it is newer than
something is judged by its last-modified time on the store's clock (`Store.modified`), never by its
`t`: hosts' clocks may disagree.
"""

from __future__ import annotations

import socket
from typing import Any

from .runs import current_run
from .state import read_dict, stamped
from .store import Store, write_json

UNREADABLE: dict[str, Any] = stamped({"code": "UNREADABLE_FAILURE_RECORD", "detail": ""}, 0.0)


def write_failure(store: Store, key: str, code: str, detail: str = "") -> None:
    """Whole: a reader sees the whole record or none."""
    write_json(
        store,
        key,
        stamped({"code": code, "detail": detail, "host": socket.gethostname(), "run": current_run()}),
    )


def read_failure(store: Store, key: str) -> dict[str, Any] | None:
    """The record, or None when there is none; an unreadable one still says something failed."""
    return read_dict(store, key, unreadable=UNREADABLE, tolerate=(OSError, ValueError))


def clear_failure(store: Store, key: str) -> None:
    store.delete(key)

"""A task's failure record: the error code of a region (or day) that failed, kept in the store, as tasks may run in
forked processes or on other hosts where the run never sees their exceptions; removed once the task succeeds."""

from __future__ import annotations

from typing import Any

from .runs import current_run
from .state import read_dict, stamped, this_host
from .store import Store, write_json

UNREADABLE: dict[str, Any] = stamped({"code": "UNREADABLE_FAILURE_RECORD", "detail": ""}, 0.0)


def write_failure(store: Store, key: str, code: str, detail: str = "") -> None:
    write_json(store, key, stamped({"code": code, "detail": detail, "host": this_host(), "run": current_run()}))


def read_failure(store: Store, key: str) -> dict[str, Any] | None:
    """The record, or None when there is none; an unreadable one still says something failed."""
    return read_dict(store, key, unreadable=UNREADABLE, tolerate=(OSError, ValueError))

"""A task's failure record: the error code of a region (or day) that failed, kept on disk.

Tasks may run in forked processes and under luigid, where the run's own process never sees their
exceptions: the failing task writes this small file, and whatever summarizes the run reads it.
The record holds the code, a short detail the caller has already scrubbed, when and on which host
it was written (an alert says which host saw what); it is removed when the task later succeeds.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from .atomic import write_json


def write_failure(path: str | os.PathLike[str], code: str, detail: str = "") -> None:
    """Atomically: a reader sees the whole record or none."""
    write_json(path, {"code": code, "detail": detail, "at": time.time(), "host": socket.gethostname()})


def read_failure(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The record, or None when there is none; an unreadable one still says something failed."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"code": "UNREADABLE_FAILURE_RECORD", "detail": "", "at": 0.0}
    return record if isinstance(record, dict) else {"code": "UNREADABLE_FAILURE_RECORD", "detail": "", "at": 0.0}


def clear_failure(path: str | os.PathLike[str]) -> None:
    Path(path).unlink(missing_ok=True)

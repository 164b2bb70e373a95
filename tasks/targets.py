"""Where everything lives: the one place that builds the data dir's store and every Luigi target;
the keys in it are spelled in `portal_export/keys.py` (the key functions here are its, for the tasks).

The data dir is a local path or `s3://BUCKET/PREFIX`; every object keeps its relative name (its
key) in both. Everything a later run or another host needs is in the store: targets, day files,
failure records, breakers, and the deployment-wide state of the cap (runs' heartbeats, marks of
solves in flight and regions that wait, the cap in force, the cap's lease, the cap log, the busy
verdict). Only Luigi's `--lock-pid-dir` is per host (`cli.lock_dir()`).
"""

import calendar
import datetime
import math
import os
import tempfile
import time

import luigi

from portal_export import store_keys as keys
from portal_export.store import LocalStore, Store

from . import config

# boto3 and luigi.contrib.s3 are imported only for an s3:// data dir: a third of a second of every
# local run's start otherwise.

_stores: dict[str, Store] = {}


def is_remote(data_dir: str) -> bool:
    return "://" in data_dir


def store() -> Store:
    """The data dir's store, built once per process; Luigi's task processes inherit it (an S3
    store opens connections of their own after the fork)."""
    where = config.data_dir_text()
    if where not in _stores:
        if is_remote(where):
            from .s3store import S3Store

            _stores[where] = S3Store(where, retry_s=config.portal().store_retry_s)
        else:
            _stores[where] = LocalStore(where)
    return _stores[where]


def check_store() -> None:
    """The store answers, with these credentials, before any other request of a run (StoreError if not)."""
    s = store()
    if not isinstance(s, LocalStore):
        s.check()  # type: ignore[attr-defined]  # S3Store's


# Luigi's completion cache is a multiprocessing.Manager: its AF_UNIX socket is
# $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, and a socket path holds 107 bytes at most (Linux)
SOCKET_PATH_MAX = 107
MANAGER_SOCKET_SUFFIX = len("/pymp-12345678/listener-12345678")


def check_tmpdir() -> None:
    """With an object store, a TMPDIR short enough for the completion cache's socket (ConfigError if not):
    otherwise Luigi's worker dies on its first line with `AF_UNIX path too long`."""
    if not worker_settings().get("cache_task_completion"):
        return
    tmp = tempfile.gettempdir()
    if len(os.fsencode(tmp)) + MANAGER_SOCKET_SUFFIX > SOCKET_PATH_MAX:
        raise config.ConfigError(
            f"TMPDIR {tmp} is too long ({len(os.fsencode(tmp))} bytes) for the socket of Luigi's completion "
            f"cache, which an s3:// data dir uses: give a TMPDIR of at most {SOCKET_PATH_MAX - MANAGER_SOCKET_SUFFIX} bytes"
        )


def worker_settings() -> dict[str, object]:
    """Luigi's own `[worker]` settings for this data dir. In an object store a completeness check is
    a request: Luigi's completion cache keeps what a task of this run found complete (or completed),
    so the day's check of its regions and RangeDaily's of its days ask nothing again."""
    return {"cache_task_completion": True} if is_remote(config.data_dir_text()) else {}


def where() -> str:
    """The data dir, for messages: an absolute path, or the s3:// URL."""
    s = store()
    return str(s.root.resolve()) if isinstance(s, LocalStore) else s.location("").rstrip("/")


def target(key: str) -> luigi.target.FileSystemTarget:
    """The Luigi target of a key: an S3Target on the store's own client, or a LocalTarget."""
    s = store()
    if isinstance(s, LocalStore):
        return luigi.LocalTarget(s.location(key))
    from luigi.contrib.s3 import S3Target

    return S3Target(s.location(key), client=s.client)  # type: ignore[attr-defined]  # S3Store's


# ---------------------------------------------------------------------------------------- keys
# The tasks' names for the keys portal_export/keys.py spells.

region_key = keys.region
region_dir = keys.region_dir
day_records_key = keys.day_records
day_health_key = keys.day_health
failed_health_key = keys.failed_health
failures_prefix = keys.failures_prefix
region_failure_key = keys.region_failure
day_failure_key = keys.day_failure


# How long a listing that showed a day complete answers for it: the checks that follow one another
# (Luigi's of each day of a range when RangeDaily's run ends, the run's own at its end) take one
# listing per month instead of two requests per day. Only "complete" is kept, and only briefly: no
# check is ever answered "missing" from memory, and a day set aside (retry-unsolvable) is set aside
# before its run checks it.
DAY_SEEN_S = 2.0
_days_seen: dict[tuple[str, datetime.date], float] = {}


def day_complete(date: datetime.date) -> bool:
    """Whether the day's two objects exist (DayExport.complete). On a disk, two looks at the files;
    in an object store, one listing of the day's month, remembered for DAY_SEEN_S."""
    if not is_remote(config.data_dir_text()):
        return all(store().exists(k) for k in (day_records_key(date), day_health_key(date)))
    where, now = config.data_dir_text(), time.monotonic()
    if now - _days_seen.get((where, date), -math.inf) < DAY_SEEN_S:
        return True
    month = [date.replace(day=d) for d in range(1, calendar.monthrange(date.year, date.month)[1] + 1)]
    found = complete_days(month)
    _days_seen.update(((where, d), now) for d in found)
    return date in found


def complete_days(days: "list[datetime.date]") -> list[datetime.date]:
    """The days among `days` whose two day objects exist: one listing, however many days
    (RangeDaily's `bulk_complete`), instead of two requests per day. It lists only the names the
    days share (`portal_records_2026-06-`), not a bucket's years of history."""
    if not days:
        return []
    names = set(store().list(keys.day_objects_prefix(days)))
    return [d for d in days if day_records_key(d) in names and day_health_key(d) in names]

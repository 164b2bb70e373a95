"""The one place that builds the data dir's store (a path or `s3://BUCKET/PREFIX`) and every Luigi target.
Everything a later run or another host needs is in the store; only Luigi's lock dir is per host."""

import datetime
import functools
import io
import os
import random
import tempfile
from typing import Any

import luigi
import luigi.format
import luigi.local_target

from portal_export import store_keys as keys
from portal_export.store import LocalStore, Store

from . import config


def is_remote(data_dir: str) -> bool:
    return "://" in data_dir


def store() -> Store:
    return store_at(config.data_dir_text())


@functools.cache  # one per data dir and process (forked task processes inherit it): an S3 client is slow to build
def store_at(where: str, retry_s: float | None = None) -> Store:
    if not is_remote(where):
        return LocalStore(where)
    from .s3store import S3Store  # boto3: a third of a second of every local run's start otherwise

    return S3Store(where, retry_s=config.portal().store_retry_s if retry_s is None else retry_s)


def check_store() -> None:
    if not isinstance(s := store(), LocalStore):
        s.check()  # type: ignore[attr-defined]  # S3Store's


TMPDIR_MAX = 107 - len("/pymp-12345678/listener-12345678")  # an AF_UNIX path's bytes (Linux), less the Manager's


def check_tmpdir() -> None:
    """An object store's completion cache listens in TMPDIR: too long is a ConfigError, not `AF_UNIX path too long`."""
    if worker_settings().get("cache_task_completion") and len(os.fsencode(tmp := tempfile.gettempdir())) > TMPDIR_MAX:
        raise config.ConfigError(
            f"TMPDIR {tmp} is too long ({len(os.fsencode(tmp))} bytes) for the socket of Luigi's completion "
            f"cache, which an s3:// data dir uses: give a TMPDIR of at most {TMPDIR_MAX} bytes"
        )


def worker_settings() -> dict[str, object]:
    """Luigi's [worker]: in an object store a completeness check is a request, asked once (the completion cache)."""
    return {"cache_task_completion": True} if is_remote(config.data_dir_text()) else {}


def where() -> str:
    s = store()
    return str(s.root.resolve()) if isinstance(s, LocalStore) else s.location("").rstrip("/")


class HiddenAtomicFile(luigi.local_target.atomic_file):
    """Luigi's atomic file, its temporary file a dot file that no listing of the data dir shows."""

    def generate_tmp_path(self, path: str) -> str:
        head, name = os.path.split(path)
        return os.path.join(head, f".{name}-luigi-tmp-{random.randrange(10**10):010d}")

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # an exception inside `with`: no file, no temporary file
            io.BufferedWriter.close(self)
            os.unlink(self.tmp_path)


class DataFile(luigi.LocalTarget):
    def open(self, mode: str = "r") -> Any:
        if mode.replace("b", "") == "w":
            self.makedirs()
            return HiddenAtomicFile(self.path)
        return super().open(mode)  # type: ignore[no-untyped-call]


def target(key: str) -> luigi.target.FileSystemTarget:
    """The tasks' outputs: a DataFile, or an ObjectTarget on the store's client (its retries, errors and counts)."""
    if isinstance(s := store(), LocalStore):
        return DataFile(s.location(key), format=luigi.format.Nop)
    from .s3store import ObjectTarget

    return ObjectTarget(s, key)  # type: ignore[arg-type]  # an S3Store


def complete_days(days: list[datetime.date]) -> list[datetime.date]:
    """The days whose two day objects exist: one listing of the names they share (`portal_records_2026-06-`)."""
    if not days:
        return []
    names = set(store().list(keys.day_objects_prefix(days)))
    return [d for d in days if keys.day_records(d) in names and keys.day_health(d) in names]

"""Where the data dir's objects live: a local directory, or a prefix in an object store. Keys are relative POSIX
paths, the same in every store; the core keeps its state through this protocol only. Ages are the store's, so hosts
whose clocks disagree agree on how old an object is. Every write is whole or not at all; `create` is the one
conditional write (a local exclusive link, S3's `If-None-Match: *`), on which leases and "one alert per run" rest."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .errors import ExportError


class StoreError(ExportError):
    """The store cannot be used (no bucket, refused credentials, no answer); never names a secret."""


class Entry(NamedTuple):
    key: str
    size: int
    modified: float  # wall-clock seconds of its last write


Entries = list[Entry]  # named here: inside a store, `list` is its method


class Store(Protocol):
    def location(self, key: str) -> str: ...  # a path, or an s3:// URL
    def read(self, key: str) -> bytes | None: ...
    def write(self, key: str, data: bytes) -> None: ...
    def create(self, key: str, data: bytes) -> bool: ...  # only if no object is there; True: this call made it
    def exists(self, key: str) -> bool: ...
    def modified(self, key: str) -> float | None: ...
    def delete(self, key: str) -> None: ...
    # every key under `prefix` (a folder or a name's start), sorted; only those after `start_after`
    def list(self, prefix: str, start_after: str = "") -> list[str]: ...
    def entries(self, prefix: str, start_after: str = "", limit: int | None = None) -> Entries: ...
    # when each key under `prefix` was last written, and the time now, on the store's clock
    def written(self, prefix: str) -> tuple[dict[str, float], float]: ...


def read_json(store: Store, key: str) -> Any:
    data = store.read(key)
    return None if data is None else json.loads(data)


def write_json(store: Store, key: str, obj: object) -> None:
    store.write(key, json.dumps(obj, ensure_ascii=False).encode())


class LocalStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def path(self, key: str) -> Path:
        return self.root / key

    def location(self, key: str) -> str:
        return str(self.path(key))

    def read(self, key: str) -> bytes | None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return self.path(key).read_bytes()
        return None

    @contextlib.contextmanager
    def _temporary(self, target: Path, data: bytes) -> Iterator[str]:
        # beside `target`: a rename or link stays on one filesystem
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            yield tmp
        finally:
            Path(tmp).unlink(missing_ok=True)

    def write(self, key: str, data: bytes) -> None:
        with self._temporary(self.path(key), data) as tmp:
            os.replace(tmp, self.path(key))

    def create(self, key: str, data: bytes) -> bool:
        with self._temporary(self.path(key), data) as tmp:
            try:
                os.link(tmp, self.path(key))  # fails when the target exists: the whole file appears, or nothing
            except FileExistsError:
                return False
        return True

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def modified(self, key: str) -> float | None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return self.path(key).stat().st_mtime
        return None

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def written(self, prefix: str) -> tuple[dict[str, float], float]:
        times = {entry.key: entry.modified for entry in self.entries(prefix)}
        return times, max([time.time(), *times.values()])

    def entries(self, prefix: str, start_after: str = "", limit: int | None = None) -> Entries:
        found = []
        for key in self.list(prefix, start_after)[:limit]:
            with contextlib.suppress(FileNotFoundError):  # deleted since the listing
                st = self.path(key).stat()
                found.append(Entry(key, st.st_size, st.st_mtime))
        return found

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        keys = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            rel = "" if rel == "." else rel + "/"
            # descend only where a key could start with the prefix: `portal_records_` skips regions/
            dirnames[:] = [
                d for d in dirnames if (rel + d + "/").startswith(prefix) or prefix.startswith(rel + d + "/")
            ]
            keys += [rel + name for name in filenames if (rel + name).startswith(prefix) and not name.startswith(".")]
        return sorted(key for key in keys if key > start_after)

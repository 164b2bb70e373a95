"""Where the data dir's objects live: a local directory, or a prefix in an object store.

Keys are relative POSIX paths (`regions/2026-06-01/north.jsonl`, `_state/breaker-ab12.json`): every
file keeps its relative name whichever store holds it. The core keeps its state (breakers, failure
records, the cap log, leases) through this protocol only, so it never knows which store it is; the
Luigi layer builds the store from the data dir (`tasks/targets.py`), an object store through
`luigi.contrib.s3`.

Ages are the store's: `modified` gives objects' last-modified times with the store's time now, so
hosts whose clocks disagree still agree on how old an object is.

Every write is whole or not at all: a reader, on this host or another, sees the old object, the
new one, or none, never a torn one. `create` is the one conditional write (a local exclusive link,
S3's `If-None-Match: *`): whoever creates a key first wins, on every host, which is what leases and
"one alert per run" are built on.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .errors import ExportError


class StoreError(ExportError):
    """The store cannot be used: no such bucket, refused credentials, an endpoint that does not
    answer, a malformed location. `code` names the cause; the message names the store, never a secret."""


class Entry(NamedTuple):
    """An object as a listing shows it: what `make state` counts and pruning dates without a read."""

    key: str
    size: int
    modified: float  # wall-clock seconds of its last write


Entries = list[Entry]  # named here: inside a store, `list` is its method
Keys = list[str]


class Store(Protocol):
    def location(self, key: str) -> str:
        """Where `key` lives, for messages and Luigi targets: a path, or an s3:// URL."""
        ...

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        ...

    def write(self, key: str, data: bytes) -> None:
        """Store `data` at `key`, replacing what was there: whole or not at all."""
        ...

    def create(self, key: str, data: bytes) -> bool:
        """Store `data` at `key` only if no object is there; True when this call created it."""
        ...

    def exists(self, key: str) -> bool: ...

    def modified(self, key: str) -> float | None:
        """When the object was last written (Unix time), or None when there is none."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key`; nothing when it is not there."""
        ...

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Every key under `prefix` (a folder, `a/b/`, or a name's start), sorted; given `start_after`
        (a key), only those after it: a listing that skips what sorts before it (S3's StartAfter)."""
        ...

    def entries(self, prefix: str, start_after: str = "", limit: int | None = None) -> Entries:
        """`list`'s first `limit` objects (all when None), with their sizes and times."""
        ...

    def written(self, prefix: str) -> tuple[dict[str, float], float]:
        """When each key under `prefix` was last written, and the time now, both on the store's own
        clock (one listing): ages that no host's clock enters."""
        ...


def read_json(store: Store, key: str) -> Any:
    """The JSON at `key`; None when absent. ValueError when the object is not JSON."""
    data = store.read(key)
    return None if data is None else json.loads(data)


def write_json(store: Store, key: str, obj: object) -> None:
    store.write(key, json.dumps(obj, ensure_ascii=False).encode())


class LocalStore:
    """A directory on this host; keys are paths below it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def path(self, key: str) -> Path:
        return self.root / key

    def location(self, key: str) -> str:
        return str(self.path(key))

    def read(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _temporary(self, target: Path, data: bytes) -> str:
        """`data` in a private temporary file beside `target` (so a rename or link stays on one filesystem)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return tmp

    def write(self, key: str, data: bytes) -> None:
        target = self.path(key)
        tmp = self._temporary(target, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def create(self, key: str, data: bytes) -> bool:
        target = self.path(key)
        tmp = self._temporary(target, data)
        try:
            os.link(tmp, target)  # fails when the target exists: the whole file appears, or nothing
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)
        return True

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def modified(self, key: str) -> float | None:
        try:
            return self.path(key).stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def written(self, prefix: str) -> tuple[dict[str, float], float]:
        """The files' mtimes and the time now. A directory is on one machine: its mtimes are that
        machine's kernel clock (a network file system's server's), as this host's clock is for a
        local disk."""
        times = {entry.key: entry.modified for entry in self.entries(prefix)}
        return times, max([time.time(), *times.values()])

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        return [key for key in self._walk(prefix) if key > start_after]

    def entries(self, prefix: str, start_after: str = "", limit: int | None = None) -> Entries:
        found = []
        for key in self.list(prefix, start_after)[:limit]:
            try:
                st = self.path(key).stat()
            except FileNotFoundError:
                continue  # deleted since the listing
            found.append(Entry(key, st.st_size, st.st_mtime))
        return found

    def _walk(self, prefix: str) -> Keys:
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
        return sorted(keys)

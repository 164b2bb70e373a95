"""What the state objects in the store share: reading one, its time stamp, whether a run is alive,
a chain of numbered generations, and a serial for names. Hosts' clocks may disagree: an object's `t`
is its writer's clock, for people and a run's own durations, never compared with another host's."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import store_keys
from .store import Store, read_json

Errors = tuple[type[Exception], ...]


def read_dict(
    store: Store, key: str, *, unreadable: Mapping[str, Any] | None = None, tolerate: Errors = (ValueError,)
) -> dict[str, Any] | None:
    """The JSON dict at `key`; None when there is no object. One that is no JSON dict, or whose read raised one of
    `tolerate`, gives a copy of `unreadable` (None by default): a foreign tool may have written it."""
    with contextlib.suppress(*tolerate):
        if (obj := read_json(store, key)) is None or isinstance(obj, dict):
            return obj
    return None if unreadable is None else dict(unreadable)


STAMP = "t"


def stamped(fields: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    return {**fields, STAMP: time.time() if now is None else now}


def stamp_of(record: Mapping[str, Any]) -> float | None:
    """Its `t`; None when it has none. ValueError or TypeError when the stamp is no number."""
    value = record.get(STAMP)
    return None if value is None else float(value)


def this_host() -> str:
    return socket.gethostname()


RUN_ID = re.compile(r"(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})")


def new_run_id() -> str:
    """Hostname and pid for people, and a random part: cloned hosts share a hostname, containers' CLIs a pid."""
    return f"{this_host()}-{os.getpid()}-{secrets.token_hex(4)}"


def split_run(run: str) -> tuple[str, int] | None:
    """(hostname, pid) of a run id; None when it is not one (then no live run)."""
    found = RUN_ID.fullmatch(run)
    return (found["host"], int(found["pid"])) if found else None


@functools.cache
def machine() -> str | None:
    """This boot and PID namespace: a run whose heartbeat says the same has our pids. None: /proc does not tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return not zombie(pid)


def zombie(pid: int) -> bool:
    """Ended, not yet reaped: its parent died first and whoever adopted it (a container's init) has not waited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def alive(
    run: str,
    age: Callable[[], float | None],
    ttl: float,
    pid: int | None = None,
    here: Callable[[], bool] = lambda: False,
) -> bool:
    """Whether `run` (or its process `pid`) still goes. `age`: seconds since its heartbeat, store's clock (None: none);
    `here`: it runs in this boot and PID namespace; each asked once at most, when needed (they may be requests). Here,
    the pid tells, and a whole run needs its heartbeat too (an ended run deleted it); elsewhere, an age under `ttl`."""
    where = split_run(run)
    if where is None:
        return False
    if here():
        if pid is not None:
            return pid_alive(pid)
        return pid_alive(where[1]) and age() is not None
    seen = age()
    return seen is not None and seen < ttl


def store_now(store: Store) -> float:
    """The store's time now (`Store.modified`'s, from the listing of the runs' few heartbeats)."""
    return store.written(store_keys.RUNS)[1]


class Chain:
    """Numbered generations under `prefix`, each made by the store's conditional `create`: of two writers of one
    number, on any hosts, one wins. The newest is in force (a lease: who owns the cap; an alert: who sent it)."""

    def __init__(self, store: Store, prefix: str, first: int = 0) -> None:
        self.store = store
        self.prefix = prefix
        self.first = first

    def key(self, n: int) -> str:
        return store_keys.generation(self.prefix, n)

    def newest(self) -> int | None:
        """The newest generation's number (one LIST); None for none yet. ValueError: a `.json` is no generation."""
        found = [store_keys.generation_of(self.prefix, key) for key in self.store.list(self.prefix)]
        return max((n for n in found if n is not None), default=None)

    def read(self, n: int, tolerate: Errors = (ValueError,)) -> dict[str, Any] | None:
        return read_dict(self.store, self.key(n), tolerate=tolerate)

    def create(self, n: int, record: Mapping[str, Any]) -> bool:  # False: another writer won it
        return self.store.create(self.key(n), json.dumps(record).encode())

    def prune(self, newest: int, keep: int, reach: int = 10) -> None:
        """Delete the ones before the `keep` newest, looking `reach` back: no listing (earlier prunes took older)."""
        for n in range(max(self.first, newest - reach), newest + 1 - keep):
            self.store.delete(self.key(n))


# A number no other call of this process gets (a forked child goes on counting: names carry the pid too).
serial = itertools.count().__next__

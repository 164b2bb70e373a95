"""What the state objects in the store share: reading one, its time stamp, whether a run is alive,
a chain of numbered generations, and a serial for names.

The modules that keep state (`runs.py`, `inflight.py`, `gate.py`, `caplog.py`, `lease.py`,
`alert_claim.py`, `breaker.py`, `failures.py`) build on these; their keys are spelled in `store_keys.py`.

- `read_dict`: an object is a JSON dict, or nothing. Any host may find an object half-written by a
  foreign tool, or of another shape; each caller says what a garbled one means to it.
- The time stamp of every object is its `t` (wall-clock seconds of the host that wrote it: for
  people and for durations a run measures on its own clock; hosts' clocks may disagree, so no
  verdict on another host's object compares its `t` with this host's clock, see `Runs.ages`).
- `new_run_id`, `split_run`: a run's identity, `<hostname>-<pid>-<random>`, which no other run has
  whatever the hostnames and PID namespaces; `machine`: the boot and PID namespace this process
  runs in, which tell whether another run's pid means anything here.
- `alive`: the one verdict on a run, or on one process of it.
- `Chain`: numbered generations under one folder, each created once through the store's
  conditional `create` (the cap's lease, an alert's claims).
- `serial`: a number no other call of this process gets, for names that must not collide.
"""

from __future__ import annotations

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

# ------------------------------------------------------------------------------------ objects


def read_dict(
    store: Store,
    key: str,
    *,
    unreadable: Mapping[str, Any] | None = None,
    tolerate: tuple[type[Exception], ...] = (ValueError,),
) -> dict[str, Any] | None:
    """The JSON dict at `key`; None when there is no object.

    An object that is no JSON dict (garbled: ValueError; or a list, a number, ...) gives a copy of
    `unreadable`, None by default. So do the errors in `tolerate` raised by the read itself (pass
    OSError too for a store that may fail so, `()` to let even a garbled object raise its
    ValueError); any other error propagates.
    """
    try:
        obj = read_json(store, key)
    except tolerate:
        return None if unreadable is None else dict(unreadable)
    if obj is None or isinstance(obj, dict):
        return obj
    return None if unreadable is None else dict(unreadable)


# -------------------------------------------------------------------------------------- stamps

STAMP = "t"


def stamped(fields: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """`fields` with their time stamp, `now` (the wall clock when None)."""
    return {**fields, STAMP: time.time() if now is None else now}


def stamp_of(record: Mapping[str, Any]) -> float | None:
    """When `record` was written: its `t`; None when it has none.

    ValueError or TypeError when the stamp is no number.
    """
    value = record.get(STAMP)
    return None if value is None else float(value)


# ------------------------------------------------------------------------------------ liveness


def this_host() -> str:
    return socket.gethostname()


RUN_ID = re.compile(r"(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})")


def new_run_id() -> str:
    """A run's identity: hostname and pid for people, and a random part, as Luigi's worker ids have,
    because neither is unique (hosts cloned from one image share a hostname; every container's CLI
    may be pid 3)."""
    return f"{this_host()}-{os.getpid()}-{secrets.token_hex(4)}"


def split_run(run: str) -> tuple[str, int] | None:
    """(hostname, pid) of a run id; None when it is not one (it then counts as no live run)."""
    found = RUN_ID.fullmatch(run)
    return (found["host"], int(found["pid"])) if found else None


@functools.cache
def machine() -> str | None:
    """This process's boot and PID namespace: a run whose heartbeat says the same runs where its
    pids are this process's pids. None where /proc does not tell (then no pid is trusted)."""
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
    return True


def alive(
    run: str,
    age: Callable[[], float | None],
    ttl: float,
    pid: int | None = None,
    here: Callable[[], bool] = lambda: False,
) -> bool:
    """Whether `run` still goes or, given `pid`, that process of it (a task that marked a solve).

    `age` is the seconds since the run's last heartbeat on the store's clock (`Runs.ages`), None
    when it has none; `here` whether the run is on this machine, in this PID namespace (its
    heartbeat says so, `machine`). Each is asked only when the verdict needs it (they may be store
    requests), at most once.
    - Here: the pid is alive (exact, and at once when it dies), and the run, not one process of it,
      still has a heartbeat (a run that ended deleted its own).
    - Elsewhere (another host, another container on this one, or not known): the heartbeat is
      younger than `ttl` (a dead host stops beating; after the TTL every host sees it dead).
    - A name that is no run id is no live run.
    """
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


# ----------------------------------------------------------------------------- generation chain


class Chain:
    """Numbered generations under the folder `prefix` (`store_keys.generation`): n + 1 follows n.

    Each generation is created once, with the store's conditional `create`: of two writers of one
    number, on any hosts, exactly one wins, and the other learns it and can read the winner's. The
    newest generation is the one in force; what a generation means is its user's (a lease: who owns
    the cap; an alert: who sent it). `first` is the number of the chain's first generation.
    """

    def __init__(self, store: Store, prefix: str, first: int = 0) -> None:
        self.store = store
        self.prefix = prefix
        self.first = first

    def key(self, n: int) -> str:
        return store_keys.generation(self.prefix, n)

    def newest(self) -> int | None:
        """The newest generation's number (one LIST); None when there is none yet.

        ValueError when a `.json` object of the folder is no generation (nothing of ours writes one).
        """
        found = [store_keys.generation_of(self.prefix, key) for key in self.store.list(self.prefix)]
        return max((n for n in found if n is not None), default=None)

    def read(self, n: int, tolerate: tuple[type[Exception], ...] = (ValueError,)) -> dict[str, Any] | None:
        """Generation `n` (`read_dict`): None when absent, or garbled unless `tolerate` is ()."""
        return read_dict(self.store, self.key(n), tolerate=tolerate)

    def create(self, n: int, record: Mapping[str, Any]) -> bool:
        """Create generation `n` holding `record`; False when it exists (another writer won it)."""
        return self.store.create(self.key(n), json.dumps(record).encode())

    def prune(self, newest: int, keep: int, reach: int = 10) -> None:
        """Delete the generations before the `keep` newest (up to `newest`), looking `reach` back:
        blind deletes, no listing (an earlier prune took the older ones)."""
        for n in range(max(self.first, newest - reach), newest + 1 - keep):
            self.store.delete(self.key(n))


# --------------------------------------------------------------------------------------- serial

_serial = itertools.count()


def serial() -> int:
    """A number no other call of this process gets (a forked child continues its parent's count:
    names that must differ between processes carry the pid too)."""
    return next(_serial)

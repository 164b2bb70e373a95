"""Every key of the data dir, spelled once. Data dirs, other hosts and outside readers rely on these
exact strings: they may move here, never change. What each holds, and for how long: docs/outputs.md."""

from __future__ import annotations

import datetime
import os
import re

DAY_PREFIX = "portal_records_"
RECORDS_SUFFIX = ".jsonl"
HEALTH_SUFFIX = ".health.json"
REGIONS = "regions/"
FAILED_HEALTH = "failed.health.json"
REPORT = "report/"


def day_records(date: datetime.date) -> str:
    return f"{DAY_PREFIX}{date:%Y-%m-%d}{RECORDS_SUFFIX}"


def day_health(date: datetime.date) -> str:
    return f"{DAY_PREFIX}{date:%Y-%m-%d}{HEALTH_SUFFIX}"


def _date(text: str) -> datetime.date | None:
    """The date spelled YYYY-MM-DD (no other ISO form); None when it spells none."""
    try:
        return datetime.date.fromisoformat(text) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else None
    except ValueError:
        return None


def day_of(key: str) -> tuple[datetime.date, str] | None:
    """(date, suffix) of a day object's key; None when it is not one."""
    stem = key.removeprefix(DAY_PREFIX)
    date = _date(stem[:10]) if key.startswith(DAY_PREFIX) else None
    return None if date is None else (date, stem[10:])


def failed_health_day(key: str) -> datetime.date | None:
    """The day of a `failed_health` key; None when it is none."""
    parts = key.split("/")
    return _date(parts[1]) if len(parts) == 3 and f"{parts[0]}/" == REGIONS and parts[2] == FAILED_HEALTH else None


def day_objects_prefix(dates: list[datetime.date]) -> str:
    """What the day objects' names of `dates` share: one listing covers them all."""
    return os.path.commonprefix([f"{DAY_PREFIX}{d:%Y-%m-%d}." for d in dates])


def region_dir(date: datetime.date) -> str:
    return f"{REGIONS}{date:%Y-%m-%d}/"


def region(date: datetime.date, name: str) -> str:
    return f"{region_dir(date)}{name}.jsonl"


def set_aside(date: datetime.date, name: str, stamp: str) -> str:
    return f"{region(date, name)}.unsolvable-{stamp}"


def failed_health(date: datetime.date) -> str:
    return f"{region_dir(date)}{FAILED_HEALTH}"


def failures_prefix(date: datetime.date) -> str:
    return f"{region_dir(date)}failures/"


def region_failure(date: datetime.date, name: str) -> str:
    # a folder of its own: listings of the region targets miss it
    return f"{failures_prefix(date)}region-{name}.json"


def day_failure(date: datetime.date) -> str:
    return f"{failures_prefix(date)}day.json"


STATE = "_state/"
BREAKERS = f"{STATE}breaker-"  # a name's start, not a folder
RUNS = f"{STATE}runs/"
CAP = f"{STATE}cap.json"
PLAN_POKE = f"{STATE}plan-poke.json"
PLAN_BUSY = f"{STATE}plan-busy.json"
CAP_LOG = f"{STATE}cap-log/"
GOVERNOR = f"{STATE}governor/"
ALERTS = f"{STATE}alerts/"
REDONE = f"{STATE}redone/"


def breaker(fingerprint: str) -> str:
    return f"{BREAKERS}{fingerprint}.json"


def run(run_id: str) -> str:
    return f"{RUNS}{run_id}.json"


def run_of(key: str) -> str:
    return key[len(RUNS) :].removesuffix(".json")


def marks(kind: str) -> str:  # `inflight` or `waiting`
    return f"{STATE}{kind}/"


INFLIGHT = marks("inflight")
WAITING = marks("waiting")


def mark(kind: str, run_id: str, pid: int, n: int) -> str:
    return f"{marks(kind)}{run_id}-{pid}-{n}"


def mark_of(name: str) -> tuple[str, str]:
    """(run id, pid as written) of a mark's name below `marks(kind)`."""
    run, _, pid = name.rpartition("-")[0].rpartition("-")
    return run, pid


def cap_change(t: float, cap: int, configured: int, run_id: str, n: int) -> str:
    return f"{CAP_LOG}{t:017.6f}-{cap}-{configured}-{run_id}-{n}.json"


def cap_changes_from(t: float) -> str:
    """A listing that starts after this skips every change before `t` (names sort by time)."""
    return f"{CAP_LOG}{t:017.6f}"


def cap_change_of(key: str) -> tuple[float, int, int, str] | None:
    """(t, cap, configured, run id) of a change's key; None when it is not one."""
    parts = key[len(CAP_LOG) :].removesuffix(".json").split("-", 3)
    try:
        return float(parts[0]), int(parts[1]), int(parts[2]), parts[3].rpartition("-")[0]
    except (IndexError, ValueError):
        return None


def governor_lease(scheduler_key: str) -> str:
    return f"{GOVERNOR}{scheduler_key}/"


def redone(date: datetime.date, stamp: str) -> str:
    return f"{REDONE}{date:%Y-%m-%d}/{stamp}.json"


def redone_of(key: str) -> datetime.date | None:
    return _date(key[len(REDONE) :].partition("/")[0]) if key.startswith(REDONE) and key.endswith(".json") else None


def alert_claims(fingerprint: str) -> str:
    return f"{ALERTS}{fingerprint}/"


def generation(chain: str, n: int) -> str:
    """Zero-padded: the store lists them in order."""
    return f"{chain}{n:08d}.json"


def generation_of(chain: str, key: str) -> int | None:
    """The number of generation `key`; None for no `.json`, ValueError for a name that is no number."""
    return int(key[len(chain) :].removesuffix(".json")) if key.endswith(".json") else None

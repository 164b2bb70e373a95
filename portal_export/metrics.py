"""What Prometheus sees of a deployment, read from the data dir's store at scrape time: it survives
restarts, needs no push, and is the same on every host. A scrape's cost stays bounded however many
days the store holds: a complete day's health and write time are read once per process (a redo's
record under `_state/redone/` sends its day to be read again). Nothing is written or deleted."""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import store_keys as keys
from .gate import CapInForce
from .health import read_health
from .inflight import InFlight, Settle
from .redo import Attempt, Redone, Tally, attempts
from .runs import MIN_TTL_S, Runs
from .state import read_dict
from .store import Store

PREFIX = "portal_export_"
Samples = list[tuple[dict[str, str], float]]
DEFAULT_WINDOW_DAYS = 35


@dataclass(frozen=True)
class Settings:
    """What the deployment is configured to do: the numbers the metrics are compared with."""

    configured_cap: int  # [resources] captchaai
    max_unsolvable_ratio: float  # [portal] max_unsolvable_ratio
    window_days: int = DEFAULT_WINDOW_DAYS  # [portal] metrics_window_days
    ttl_s: float = MIN_TTL_S  # runs.ttl_s
    timeout_s: float = 120.0  # [captchaai] timeout_s: a solve a process left counts this long after its submit
    submit_s: float = 30.0  # [captchaai] http_timeout_s: and this much longer where its submit was not answered
    # the breaker objects of the key and login in use; None when not known here: every breaker counts
    breakers_in_use: frozenset[str] | None = None


@dataclass
class Metric:
    """One metric family: `kind` is "gauge" or "counter" (its name then ends in `_total`)."""

    name: str
    kind: str
    help: str
    samples: Samples = field(default_factory=list)


@dataclass(frozen=True)
class DayFacts:
    """What the metrics keep of a complete day's health file."""

    tally: Tally = field(default_factory=Tally)
    unsolvable_ratio: float = 0.0
    p95_solve_seconds: float | None = None
    rows: int = 0
    attempts: frozenset[Attempt] = frozenset()

    @classmethod
    def of(cls, health: Mapping[str, Any] | None) -> DayFacts:
        """From a health record; an unreadable one (garbled, of another shape) counts nothing."""
        h = health or {}
        found = h.get("regions")
        regions: Mapping[str, Any] = found if isinstance(found, dict) else {}
        p95 = h.get("p95_solve_seconds")
        try:
            errors = Counter(
                str(code) for r in regions.values() if isinstance(r, dict) for code in r.get("transient_errors") or ()
            )
            n = {k: int(h.get(k, 0)) for k in ("solves", "unsolvable", "submits", "refused_tokens", "busy_waits")}
            tally = Tally(n["solves"], n["unsolvable"], n["submits"], n["refused_tokens"], n["busy_waits"], errors)
            ratio, p95_s = float(h.get("unsolvable_ratio", 0.0)), None if p95 is None else float(p95)
            return cls(tally, ratio, p95_s, int(h.get("rows", 0)), frozenset(attempts(regions)))
        except (TypeError, ValueError):
            return cls()


def midnight_utc(day: datetime.date) -> float:
    return datetime.datetime.combine(day, datetime.time(), datetime.timezone.utc).timestamp()


class Metrics:
    """The `portal_export_*` metrics of one store; keep one per process so its cache serves every scrape."""

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._days: dict[datetime.date, DayFacts] = {}  # complete days: their health never changes
        self._written: dict[datetime.date, float | None] = {}
        self._records: dict[str, Mapping[str, Any]] = {}  # redo records (`redo.py`): they never change

    def complete_days(self) -> list[datetime.date]:
        """Every complete day (both day objects there), oldest first: one listing."""
        found: dict[datetime.date, set[str]] = {}
        for key in self.store.list(keys.DAY_PREFIX):
            parsed = keys.day_of(key)
            if parsed is not None:
                found.setdefault(parsed[0], set()).add(parsed[1])
        return sorted(d for d, suffixes in found.items() if {keys.RECORDS_SUFFIX, keys.HEALTH_SUFFIX} <= suffixes)

    def facts(self, day: datetime.date) -> DayFacts:
        if day not in self._days:
            self._days[day] = DayFacts.of(read_health(self.store, keys.day_health(day)))
        return self._days[day]

    def written(self, day: datetime.date) -> float | None:
        """When the complete day's files were written: the later of the two."""
        if self._written.get(day) is None:
            stamps = [self.store.modified(k) for k in (keys.day_records(day), keys.day_health(day))]
            self._written[day] = max((t for t in stamps if t is not None), default=None)
        return self._written[day]

    def window(self) -> list[datetime.date]:
        """today − N … today − 1, UTC."""
        today = datetime.datetime.fromtimestamp(self.clock(), datetime.timezone.utc).date()
        return [today - datetime.timedelta(days=n) for n in range(self.settings.window_days, 0, -1)]

    def failed(self, day: datetime.date) -> bool:
        """The day's last run failed: a failure record, or the health of a day that failed validation."""
        failures = keys.failures_prefix(day)
        return any(
            k == keys.failed_health(day) or k.startswith(failures) for k in self.store.list(keys.region_dir(day))
        )

    def redone(self, state: Iterable[str]) -> dict[datetime.date, Redone]:
        """The redo records of every day (`redo.py`), from the `_state/` listing; each read once. A
        day with a record new since the last scrape was redone meanwhile: its facts are read again."""
        by_day: dict[datetime.date, list[str]] = {}
        for key in state:
            d = keys.redone_of(key)
            if d is not None:
                by_day.setdefault(d, []).append(key)
        found: dict[datetime.date, Redone] = {}
        for d, names in by_day.items():
            if new := [k for k in names if k not in self._records]:
                self._days.pop(d, None)
                self._written.pop(d, None)
            self._records.update({k: read_dict(self.store, k) or {} for k in new})  # a garbled record counts nothing
            found[d] = Redone([self._records[k] for k in sorted(names)])
        return found

    def counted(self, days: list[datetime.date], redone: Mapping[datetime.date, Redone]) -> Tally:
        """What the counters hold: the complete days' health files, and what redoing days took out
        of them (so no counter decreases when a day is exported again)."""
        total = Tally()
        for d in days:
            total.add(self.facts(d).tally)
        complete = set(days)
        for d, records in redone.items():
            extra = records.tally(self.facts(d).attempts if d in complete else None)
            if extra is not None:
                total.add(extra)
        return total

    def breaker_open(self, state: Iterable[str]) -> bool:
        """A breaker refuses the key or login in use (any breaker, when the key in use is not known)."""
        in_use = self.settings.breakers_in_use
        return any(k.startswith(keys.BREAKERS) and (in_use is None or k in in_use) for k in state)

    def in_flight(self, state: Iterable[str]) -> int:
        """The deployment's solves in flight, over all hosts, as `InFlight` counts them (a solve a process left, until
        it ends at CaptchaAI), deleting and polling none."""
        s = self.settings
        marks = InFlight(self.store, Runs(self.store, s.ttl_s), settle=Settle(s.timeout_s, s.submit_s))
        return len(marks.standing(poll=False)[0]) if any(k.startswith(marks.prefix) for k in state) else 0

    def collect(self) -> list[Metric]:
        """Every metric now. A store error propagates (the caller reports the store as down)."""
        days = self.complete_days()
        for gone in self._days.keys() - set(days):  # set aside by retry-unsolvable: read it again when rebuilt
            del self._days[gone]
            self._written.pop(gone, None)
        state = self.store.list(keys.STATE)
        counts = self.counted(days, self.redone(state))
        return self._day_metrics(days) + _counter_metrics(counts) + self._state_metrics(state)

    def _day_metrics(self, days: list[datetime.date]) -> list[Metric]:
        s = self.settings
        missing = [d for d in self.window() if d not in set(days)]
        newest = days[-1] if days else None
        last = self.facts(newest) if newest else None
        return [
            gauge("last_success_timestamp_seconds", self.written(newest) if newest else None),
            gauge("last_complete_day_timestamp_seconds", midnight_utc(newest) if newest else None),
            gauge("days_missing", len(missing)),
            gauge("days_failed", sum(self.failed(d) for d in missing)),
            gauge("metrics_window_seconds", s.window_days * 86400),
            gauge("last_day_unsolvable_ratio", last.unsolvable_ratio if last else None),
            gauge("last_day_p95_solve_seconds", last.p95_solve_seconds if last else None),
            gauge("last_day_rows", last.rows if last else None),
            gauge("max_unsolvable_ratio", s.max_unsolvable_ratio),
        ]

    def _state_metrics(self, state: list[str]) -> list[Metric]:
        s = self.settings
        cap_seen = CapInForce(self.store, Runs(self.store, s.ttl_s)).read() if keys.CAP in state else None
        return [
            gauge("cap_configured", s.configured_cap),
            gauge("cap_in_force", s.configured_cap if cap_seen is None else cap_seen[0]),
            gauge("solves_in_flight", self.in_flight(state)),
            gauge("breaker_open", int(self.breaker_open(state))),
            gauge("state_objects", len(state)),
        ]


HELP = {
    "last_success_timestamp_seconds": "When the newest complete day's files were written (Unix time).",
    "last_complete_day_timestamp_seconds": "The newest complete day, as midnight UTC of that date (Unix time).",
    "days_missing": "Days of the window (today - metrics_window_days ... today - 1, UTC) with no complete day.",
    "days_failed": "Days of the window whose last run failed (a failure record or a failed health file).",
    "metrics_window_seconds": "[portal] metrics_window_days in seconds: the window of days_missing and days_failed.",
    "last_day_unsolvable_ratio": "Unsolvable regions / configured regions of the newest complete day.",
    "last_day_p95_solve_seconds": "95th percentile solve time of the newest complete day.",
    "last_day_rows": "Records of the newest complete day.",
    "max_unsolvable_ratio": "[portal] max_unsolvable_ratio: a day above it fails validation.",
    "cap_configured": "[resources] captchaai: the ceiling of solves in flight.",
    "cap_in_force": "The cap on solves in flight now (the configured cap while no run follows the plan).",
    "solves_in_flight": "The deployment's solves in flight now, over all hosts.",
    "breaker_open": "1 while a breaker refuses the key or login in use (make clear-breaker once fixed), else 0.",
    "state_objects": f"Objects under {keys.STATE}.",
    "solves_total": "Solves recorded in the complete days' health files, by outcome (those of regions solved again included).",
    "submits_total": "CaptchaAI submits of the complete days.",
    "refused_tokens_total": "Tokens the portal refused in the complete days.",
    "busy_waits_total": "Submits refused for busy plan threads and waited out, in the complete days.",
    "transient_errors_total": "Transient errors retried in the complete days, by error code (CaptchaAI's, the portal's, the store's).",
}


def gauge(name: str, value: float | None) -> Metric:
    return Metric(PREFIX + name, "gauge", HELP[name], [] if value is None else [({}, value)])


def _counter_metrics(counts: Tally) -> list[Metric]:
    """The complete days' counters (those of regions solved again included: they never decrease)."""
    samples: dict[str, Samples] = {
        "solves": [({"outcome": "solved"}, counts.solved), ({"outcome": "unsolvable"}, counts.unsolvable)],
        "submits": [({}, counts.submits)],
        "refused_tokens": [({}, counts.refused_tokens)],
        "busy_waits": [({}, counts.busy_waits)],
        "transient_errors": [({"code": c}, n) for c, n in sorted(counts.transient_errors.items())],
    }
    return [Metric(f"{PREFIX}{name}_total", "counter", HELP[f"{name}_total"], s) for name, s in samples.items()]

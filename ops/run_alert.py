"""One alert per run that leaves asked-for work missing, and the progress and summary lines of every run. The
facts come from the data dir, so they are the same under the local scheduler and luigid. Luigi's own e-mails stay
off: the run's one summary replaces them. Where the alert goes: `alert_channels.py`."""

import argparse
import datetime
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from portal_export import alert_claim, alert_text, forksafe, store, store_keys
from portal_export.breaker import KeyBreaker
from portal_export.failures import read_failure
from portal_export.runs import current_run
from portal_export.state import store_now
from portal_export.store import StoreError
from tasks import config, targets
from tasks.day import DayExport
from tasks.secrets import say

from .alert_channels import config_set, deliver

PROGRESS_EVERY_S = 0.5  # how often the day files are looked for; a line per completed day, not per look
NOT_RUN = "NOT_RUN"  # a region without output or failure record: the run ended before it ran


def complete_days(days: Sequence[datetime.date]) -> set[datetime.date]:
    """Complete as RangeDaily judges it (DayExport.bulk_complete): one listing for all the days."""
    return set(DayExport.bulk_complete(list(days))) if days else set()


def rerun_command(args: argparse.Namespace) -> str:
    if args.command == "backfill":
        command = f"make backfill START={args.start} STOP={args.stop}"
        command += " NEWEST_FIRST=1" if args.newest_first else ""
        command += f" TASK_LIMIT={args.task_limit}" if args.task_limit else ""
    else:
        command = f"make {args.command} DAY={args.day}"
    return command + (f" WORKERS={args.workers}" if args.workers else "")


def read_json(key: str) -> Any:
    try:
        return store.read_json(targets.store(), key)
    except (OSError, ValueError):
        return None


def failure_code(key: str, since: float, written: dict[str, float]) -> str:
    """The record's code, marked when `written` before `since` (both the store's clock)."""
    record = read_failure(targets.store(), key)
    if record is None:
        return NOT_RUN
    code = str(record.get("code") or "UNKNOWN")
    return code if written.get(key, since) >= since - alert_claim.SLACK_S else f"{code} (earlier run)"


def missing_day(day: datetime.date, regions: Sequence[str], since: float) -> alert_text.MissingDay:
    """What is missing of `day`, its failure records older than `since` marked so."""
    health = read_json(store_keys.failed_health(day))
    if health is not None and "unsolvable_ratio" in health:
        ratio, unsolvable = float(health["unsolvable_ratio"]), health.get("unsolvable_regions", ())
        return alert_text.MissingDay(day, unsolvable_ratio=ratio, unsolvable_regions=unsolvable)
    written = targets.store().written(store_keys.failures_prefix(day))[0]
    failed = {
        region: failure_code(store_keys.region_failure(day, region), since, written)
        for region in regions
        if not targets.store().exists(store_keys.region(day, region))
    }
    day_code = None
    if not failed and read_failure(targets.store(), store_keys.day_failure(day)) is not None:
        day_code = failure_code(store_keys.day_failure(day), since, written)
    return alert_text.MissingDay(day, failed_regions=failed, day_code=day_code)


def seen_by(missing: Sequence[alert_text.MissingDay]) -> dict[str, dict[str, int]]:
    """Host -> failure code -> tasks of the missing days, when another host saw any (the footer names this one)."""
    seen: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for m in missing:
        keys = [store_keys.region_failure(m.day, region) for region in m.failed_regions]
        if m.day_code:
            keys.append(store_keys.day_failure(m.day))
        for key in keys:
            record = read_failure(targets.store(), key)
            if record is not None and record.get("host"):
                seen[str(record["host"])][str(record.get("code") or "UNKNOWN")] += 1
    return {host: dict(codes) for host, codes in seen.items()} if set(seen) - {socket.gethostname()} else {}


def slow_days(days: Sequence[datetime.date], limit: float) -> dict[datetime.date, float]:
    with ThreadPoolExecutor(8) as pool:  # from an object store: a few round trips, not one per day
        p95s = list(pool.map(lambda day: (read_json(store_keys.day_health(day)) or {}).get("p95_solve_seconds"), days))
    return {
        day: float(p95) for day, p95 in zip(days, p95s, strict=True) if isinstance(p95, (int, float)) and p95 > limit
    }


class RunAlert:
    """Around one run: progress lines while it goes, then (`finish(code)`) the summary and any alert."""

    def __init__(self, args: argparse.Namespace, days: Sequence[datetime.date]) -> None:
        self.command, self.days, self.rerun = args.command, list(days), rerun_command(args)
        self.busy_plan: tuple[int, int] | None = None  # (threads, working) when every thread worked at the start
        self.started = time.time()  # this host's clock: the run's own durations
        self.started_store = store_now(targets.store())  # the store's: what other hosts wrote since
        complete = complete_days(self.days)
        self.todo = [d for d in self.days if d not in complete]
        self.done: list[datetime.date] = []
        self.finished = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="progress", daemon=True)
        self._mails = config_set("email", "receiver", "")  # no e-mail from Luigi (`format = none` logs a line each)

    def __enter__(self) -> "RunAlert":
        self._mails.__enter__()
        self._thread.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self.finished:
            if isinstance(exc, Exception):  # e.g. no central scheduler: the night still failed
                self.finish(2 if isinstance(exc, ValueError) or hasattr(exc, "code") else 1, stopped=str(exc))
            else:
                self._stop_watching()  # Ctrl-C: the operator is there

    def _watch(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY_S):
            self._progress()

    def _progress(self) -> None:
        with self._lock, forksafe.guard:  # no fork while this writes to stderr (portal_export/forksafe.py)
            waiting = [d for d in self.todo if d not in self.done]
            complete = complete_days(waiting)
            for day in waiting:
                if day in complete:
                    self.done.append(day)
                    say(alert_text.progress_line(day, len(self.done), len(self.todo), time.time() - self.started))

    def _stop_watching(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._progress()  # every day completed gets its line before the summary
        self._mails.__exit__(None, None, None)

    def facts(self, code: int, stopped: str | None = None) -> alert_text.RunFacts:
        regions = config.regions()
        complete = complete_days(self.days)
        missing = [missing_day(d, regions, self.started_store) for d in self.days if d not in complete]
        limit = config.alerts().p95_warn_s
        return alert_text.RunFacts(
            command=self.command,
            days=self.days,
            missing=missing,
            regions=regions,
            rerun=self.rerun,
            exit_code=1 if missing and not code else code,
            max_unsolvable_ratio=config.portal().max_unsolvable_ratio,
            breaker_codes=KeyBreaker.codes(targets.store()) if missing else (),
            busy_plan=self.busy_plan,
            slow_days=slow_days([d for d in self.todo if d in complete], limit),
            p95_warn_s=limit,
            stopped=stopped,
            where=f"host {socket.gethostname()}, data dir {targets.where()}",
            seen_by=seen_by(missing),
        )

    def finish(self, code: int, stopped: str | None = None) -> int:
        """Print the summary and send any alert due; the exit code (non-zero when a day is missing)."""
        self._stop_watching()
        self.finished = True
        facts = self.facts(code, stopped)
        summary = alert_text.summarize(facts)
        say(summary.text)
        if summary.to_send:
            self.send_once(facts, summary)
        return facts.exit_code

    def send_once(self, facts: alert_text.RunFacts, summary: alert_text.Summary) -> None:
        """Deliver the alert unless another host of the same run did (portal_export/alert_claim.py)."""
        fingerprint = alert_claim.fingerprint(facts, summary.kind)
        try:
            claim = alert_claim.claim(
                targets.store(), fingerprint, self.started_store, socket.gethostname(), current_run()
            )
        except (OSError, ValueError, StoreError) as err:  # the store cannot say: twice rather than never
            say(f"warning: could not check whether another host sent this alert ({type(err).__name__}): sending it")
        else:
            if not claim.ours:
                at = datetime.datetime.fromtimestamp(claim.at, datetime.timezone.utc).strftime("%H:%M:%S UTC")
                say(f"alert: sent by host {claim.host} at {at} for this same run (alert {fingerprint}): not sent again")
                return
        deliver(summary)

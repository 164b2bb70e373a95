"""DayExport: the day's four regions, validated, as one records file and one health file."""

import datetime
import json
import os
import time
from collections.abc import Iterable
from typing import Any

import luigi

from portal_export import store_keys
from portal_export.caplog import CapLog, seconds_below
from portal_export.health import DayHealth, day_health, validate
from portal_export.region_file import copy_records, read_facts

from . import config, targets
from .base import PortalTask
from .region import RegionExport


class DayExport(PortalTask):
    """Named `date` so that `RangeDaily --of DayExport` needs no other argument."""

    date = luigi.DateParameter()
    region_task = RegionExport  # what a region is; tests put a subclass with a fake solver here

    def requires(self) -> dict[str, RegionExport]:
        return {region: self.region_task(self.date, region) for region in config.regions()}

    def output(self) -> dict[str, luigi.target.FileSystemTarget]:
        # A day is complete when these two exist: they are written only for validated days.
        records, health = store_keys.day_records(self.date), store_keys.day_health(self.date)
        return {"records": targets.target(records), "health": targets.target(health)}

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[datetime.date]) -> list[datetime.date]:
        """RangeDaily's check, one listing for the whole range (`cls` may be a functools.partial of this class)."""
        return targets.complete_days(list(parameter_tuples))

    def failure_key(self) -> str:
        return store_keys.day_failure(self.date)

    def clear_failures(self) -> None:
        """The day's record, and those its regions left from earlier runs (see PortalTask)."""
        store = targets.store()
        for key in store.list(store_keys.failures_prefix(self.date)):
            store.delete(key)

    def work(self) -> None:
        facts: dict[str, dict[str, Any]] = {}
        # The records file streams the regions' record lines in; it is made only when the day passes.
        with self.output()["records"].open("w") as records:
            for region, target in self.input().items():
                with target.open("r") as f:
                    facts[region] = read_facts(f)
                    copy_records(f, records, facts[region]["rows"], f"region target {target.path}")
            self.status(percent=50)
            health = self.health(facts)
            try:
                validate(health, config.portal().max_unsolvable_ratio)
            except Exception:
                with targets.target(store_keys.failed_health(self.date)).open("w") as failed:
                    failed.write(json.dumps(health, indent=2).encode())
                raise
        # a run killed between the two writes both again
        with self.output()["health"].open("w") as out:
            out.write(json.dumps(health, indent=2).encode())
        targets.store().delete(store_keys.failed_health(self.date))
        self.status(f"{health['rows']} rows, {health['solves']} solves, {health['unsolvable']} unsolvable", 100)

    def health(self, facts: dict[str, dict[str, Any]]) -> DayHealth:
        """Time under a lowered cap, from one listing of the cap log: each region's while it ran (counted
        here, off the regions' CaptchaAI slots), and the day's from the start of the run completing it."""
        starts = [f["started_at"] for f in facts.values() if "started_at" in f]
        started = float(os.environ.get(config.RUN_STARTED) or min(starts, default=time.time()))  # the CLI run's start
        changes = CapLog(targets.store()).changes(min([started, *starts]))  # the windows' part of the log only
        for f in facts.values():
            if "started_at" in f and "seconds_below_cap" not in f:
                f["seconds_below_cap"] = seconds_below(changes, f["started_at"], f["ended_at"])
        return day_health(self.date, list(facts), facts, seconds_below(changes, started, time.time()))

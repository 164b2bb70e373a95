"""DayExport: the day's four regions, validated, as one records file and one health file."""

import datetime
import json
import time
from collections.abc import Iterable
from typing import Any

import luigi

from portal_export.caplog import CapLog
from portal_export.health import day_health, validate
from portal_export.store import read_json

from . import config, governor, targets
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
        return {
            "records": targets.target(targets.day_records_key(self.date)),
            "health": targets.target(targets.day_health_key(self.date)),
        }

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[datetime.date]) -> list[datetime.date]:
        """RangeDaily's completeness check: one listing of the day objects for the whole range.
        (`cls` may be a functools.partial of this class, as RangeDaily calls it.)"""
        return targets.complete_days(list(parameter_tuples))

    def failure_key(self) -> str:
        return targets.day_failure_key(self.date)

    def work(self) -> None:
        regions = config.regions()
        store = targets.store()
        facts: dict[str, dict[str, Any]] = {}
        for done, region in enumerate(regions, 1):
            facts[region] = read_json(store, targets.region_key(self.date, region))
            self.progress(int(100 * done / len(regions)))
        # From the start of the run that completes it: the time the run spent under a lowered cap
        # before the day was complete (its regions waiting for a slot included).
        starts = [f["started_at"] for f in facts.values() if "started_at" in f]
        started = governor.run_started() or min(starts, default=time.time())
        below = CapLog(store).seconds_below(started, time.time())
        health = day_health(self.date, regions, facts, below)
        try:
            validate(health, config.portal().max_unsolvable_ratio)
        except Exception:
            store.write(targets.failed_health_key(self.date), json.dumps(health, indent=2).encode())
            raise
        store.delete(targets.failed_health_key(self.date))
        # Each object whole (one write); the health object last, so a day with its health has its records.
        records = "".join(
            json.dumps(r, ensure_ascii=False) + "\n" for region in regions for r in facts[region]["records"]
        )
        store.write(targets.day_records_key(self.date), records.encode())
        store.write(targets.day_health_key(self.date), json.dumps(health, indent=2).encode())
        self.status(f"{health['rows']} rows, {health['solves']} solves, {health['unsolvable']} unsolvable")

"""DayExport: the day's four regions, validated, as one records file and one health file."""

import json
import time
from pathlib import Path
from typing import Any

import luigi

from portal_export.caplog import CapLog
from portal_export.health import day_health, validate

from . import config, governor, targets
from .base import PortalTask
from .region import RegionExport


class DayExport(PortalTask):
    """Named `date` so that `RangeDaily --of DayExport` needs no other argument."""

    date = luigi.DateParameter()
    region_task = RegionExport  # what a region is; tests put a subclass with a fake solver here

    def requires(self) -> dict[str, RegionExport]:
        return {region: self.region_task(self.date, region) for region in config.regions()}

    def output(self) -> dict[str, luigi.LocalTarget]:
        # RangeDaily finds complete days by these paths: they exist only for validated days.
        return {
            "records": luigi.LocalTarget(targets.day_records_path(self.date)),
            "health": luigi.LocalTarget(targets.day_health_path(self.date)),
        }

    def failure_path(self) -> str:
        return targets.day_failure_path(self.date)

    def work(self) -> None:
        regions = config.regions()
        facts: dict[str, dict[str, Any]] = {}
        for done, (region, target) in enumerate(self.input().items(), 1):
            with target.open() as f:
                facts[region] = json.load(f)
            self.progress(int(100 * done / len(regions)))
        # From the start of the run that completes it: the time the run spent under a lowered cap
        # before the day was complete (its regions waiting for a slot included).
        starts = [f["started_at"] for f in facts.values() if "started_at" in f]
        started = governor.run_started() or min(starts, default=time.time())
        below = CapLog(config.state_dir()).seconds_below(started, time.time())
        health = day_health(self.date, regions, facts, below)
        try:
            validate(health, config.portal().max_unsolvable_ratio)
        except Exception:
            failed = luigi.LocalTarget(targets.failed_health_path(self.date))
            with failed.open("w") as f:
                json.dump(health, f, indent=2)
            raise
        Path(targets.failed_health_path(self.date)).unlink(missing_ok=True)
        with self.output()["records"].open("w") as f:
            for region in regions:
                for record in facts[region]["records"]:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
        with self.output()["health"].open("w") as f:
            json.dump(health, f, indent=2)
        self.status(f"{health['rows']} rows, {health['solves']} solves, {health['unsolvable']} unsolvable")

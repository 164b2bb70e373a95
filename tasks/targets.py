"""Where every output lives: one place builds every path (a str, as Luigi's targets want)."""

import datetime

from portal_export.store import LocalStore, Store

from . import config


def store() -> Store:
    """The data dir's objects (state shared by every host: alert claims, ...)."""
    return LocalStore(config.data_dir())


def region_path(date: datetime.date, region: str) -> str:
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / f"{region}.json")


def day_records_path(date: datetime.date) -> str:
    return str(config.data_dir() / f"portal_records_{date:%Y-%m-%d}.jsonl")


def day_health_path(date: datetime.date) -> str:
    return str(config.data_dir() / f"portal_records_{date:%Y-%m-%d}.health.json")


def failed_health_path(date: datetime.date) -> str:
    """Health of a day that failed validation: kept out of the day files, which mean 'complete'."""
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / "failed.health.json")


def region_failure_path(date: datetime.date, region: str) -> str:
    """The error code of the region's last failure; a folder of its own, so globs of region targets miss it."""
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / "failures" / f"region-{region}.json")


def day_failure_path(date: datetime.date) -> str:
    """The error code of the day's last failure other than validation (that one is failed.health.json)."""
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / "failures" / "day.json")

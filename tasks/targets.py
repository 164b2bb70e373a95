"""Where every output lives: one place builds every path (a str, as Luigi's targets want)."""

from . import config


def region_path(date, region):
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / f"{region}.json")


def day_records_path(date):
    return str(config.data_dir() / f"portal_records_{date:%Y-%m-%d}.jsonl")


def day_health_path(date):
    return str(config.data_dir() / f"portal_records_{date:%Y-%m-%d}.health.json")


def failed_health_path(date):
    """Health of a day that failed validation: kept out of the day files, which mean 'complete'."""
    return str(config.data_dir() / "regions" / f"{date:%Y-%m-%d}" / "failed.health.json")

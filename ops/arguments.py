"""The days the operator gives a command, checked before anything runs; UsageError exits 2."""

import datetime
import re


class UsageError(ValueError):
    pass


def parse_day(name: str, value: str | None, why: str = "") -> datetime.date:
    """A date of at most today (UTC); `why` ends the message that refuses a later one."""
    if not value:
        raise UsageError(f"{name} is required, as YYYY-MM-DD")
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a date: give YYYY-MM-DD") from None
    today = utc_today()
    if day > today:
        raise UsageError(f"{name}={value} is in the future (today is {today} in UTC){why}")
    return day


def parse_ended_day(name: str, value: str | None) -> datetime.date:
    """A day that has ended in UTC: a complete day is never exported again."""
    day = parse_day(name, value)
    today = utc_today()
    if day >= today:
        newest = today - datetime.timedelta(days=1)
        raise UsageError(
            f"{name}={value} has not ended yet in UTC (today is {today}): a day is exported once it has ended, "
            f"the newest is {newest}"
        )
    return day


def utc_today() -> datetime.date:
    # RangeDaily clips to its own "now", which is UTC
    return datetime.datetime.now(datetime.timezone.utc).date()

"""What the sandbox portal serves: regions, their sitekeys and the daily records.

Everything is derived from (day, region) alone, never from the sandbox seed, so a
test or the demo can compute the expected export without access to the config.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random

REGIONS = ("north", "south", "east", "west")
_CHANNELS = ("web", "partner-api", "retail", "phone")
_PARTNERS = ("Acme GmbH", "Zürich Ltd", "O'Brien & Sons", "Åsa AB", "北方贸易")


def sitekey_for(region: str) -> str:
    """The reCAPTCHA sitekey the portal shows for a region (40 chars, like Google's)."""
    if region not in REGIONS:
        raise ValueError(f"unknown region {region!r}; regions are {REGIONS}")
    head = f"6Lsandbox-{region}-"
    return head + hashlib.sha256(region.encode()).hexdigest()[: 40 - len(head)]


def region_of_sitekey(sitekey: str) -> str | None:
    return next((r for r in REGIONS if sitekey_for(r) == sitekey), None)


def parse_day(day) -> dt.date:
    """A date, or a strict YYYY-MM-DD string (ValueError otherwise)."""
    if isinstance(day, dt.date):
        return day
    if not isinstance(day, str) or len(day) != 10:
        raise ValueError(f"day must be YYYY-MM-DD, got {day!r}")
    return dt.date.fromisoformat(day)


def expected_records(day, region: str, records_per_region: tuple = (3, 12)) -> list[dict]:
    """Exactly the records the portal serves for (day, region).

    Key order is deliberately not alphabetical and values mix types (str, int,
    float, bool, null, nested object, non-ASCII) so a client that re-sorts or
    re-types fields is caught by a byte-equal comparison.
    """
    day = parse_day(day).isoformat()
    if region not in REGIONS:
        raise ValueError(f"unknown region {region!r}")
    rng = random.Random(f"records|{day}|{region}")  # str seeds hash stably across runs
    lo, hi = records_per_region
    records = []
    for i in range(rng.randint(lo, hi)):
        units = rng.randint(0, 500)
        records.append(
            {
                "record_id": f"{region}-{day}-{i:04d}",
                "region": region,
                "day": day,
                "units": units,
                "amount": round(units * rng.uniform(0.5, 40.0), 2),
                "approved": rng.random() < 0.7,
                "note": None if rng.random() < 0.5 else f"batch {rng.randint(1, 99)}",
                "partner": {
                    "name": rng.choice(_PARTNERS),
                    "id": rng.randint(1000, 9999),
                    "score": round(rng.random(), 3),
                    "flags": None,
                },
                "channel": rng.choice(_CHANNELS),
            }
        )
    return records

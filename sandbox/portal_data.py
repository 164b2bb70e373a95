"""What the sandbox portal serves: regions, their sitekeys and the daily records.

Everything is derived from (day, region) alone, never from the sandbox seed, so a
test or the demo can compute the expected export without access to the config.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import random
import re

REGIONS = ("north", "south", "east", "west")  # the default regions; any name REGION_NAME allows is served
REGION_NAME = re.compile(r"[A-Za-z0-9_-]+")
_SITEKEY_HEAD = "6Lsandbox-"
_CHANNELS = ("web", "partner-api", "retail", "phone")
_PARTNERS = ("Acme GmbH", "Zürich Ltd", "O'Brien & Sons", "Åsa AB", "北方贸易")


def check_region(region: str) -> str:
    if not isinstance(region, str) or not REGION_NAME.fullmatch(region):
        raise ValueError(f"unknown region {region!r}: names are letters, digits, - and _")
    return region


def sitekey_for(region: str) -> str:
    """The reCAPTCHA sitekey the portal shows for a region (40 chars like Google's, longer for long names)."""
    head = f"{_SITEKEY_HEAD}{check_region(region)}-"
    return head + hashlib.sha256(region.encode()).hexdigest()[: max(8, 40 - len(head))]


def region_of_sitekey(sitekey: str) -> str | None:
    """The region whose sitekey this is; a name may hold '-', so every split is tried."""
    if not sitekey.startswith(_SITEKEY_HEAD):
        return None
    rest = sitekey[len(_SITEKEY_HEAD) :]
    for i, char in enumerate(rest):
        if char == "-" and REGION_NAME.fullmatch(rest[:i]) and sitekey_for(rest[:i]) == sitekey:
            return rest[:i]
    return None


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
    check_region(region)
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


def report_records(day, market: str, records_per_region: tuple = (3, 12)) -> list[dict]:
    """The records the daily-report portal serves for (day, market): its own keys, its date written DD.MM.YYYY."""
    day = parse_day(day)
    return [
        {
            "id": r["record_id"],
            "market": market,
            "date": f"{day:%d.%m.%Y}",
            "units": r["units"],
            "amount": r["amount"],
            "partner": r["partner"]["name"],
            "channel": r["channel"],
        }
        for r in expected_records(day, market, records_per_region)
    ]


CSV_HEADER = ("record_id", "day", "region", "partner", "units", "amount", "note", "comment")
# the first three alone (the fewest records a region has) hold every trap
_COMMENTS = ('said "fine",\nthen left — ok', "", "NA", "a, b; c", "€ 5 für Größe", "line one\r\nline two")


def expected_csv_records(day, region: str, records_per_region: tuple = (3, 12)) -> list[dict]:
    """The records of a CSV export, as the strings of its file: commas, quotes, newlines and
    non-ASCII in fields, empty fields, "NA", leading zeros and a decimal comma, so a reader that
    guesses types or NA values is caught."""
    rows = []
    for i, r in enumerate(expected_records(day, region, records_per_region)):
        rows.append(
            {
                "record_id": r["record_id"],
                "day": r["day"],
                "region": r["region"],
                "partner": r["partner"]["name"],
                "units": f"{r['units']:04d}",
                "amount": f"{r['amount']:.2f}".replace(".", ",") if i % 2 else f"{r['amount']:.2f}",
                "note": r["note"] or "",
                "comment": _COMMENTS[i % len(_COMMENTS)],
            }
        )
    return rows


def csv_body(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_HEADER)  # minimal quoting, CRLF: what Excel and most servers write
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()

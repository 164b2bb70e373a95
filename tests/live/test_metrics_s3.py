"""What a scrape of a bucket holding years of days costs, counted by the store itself (SeaweedFS's
own request counters): the listings, and a GET only for a day not seen before."""

import datetime
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from ops import metrics_server
from portal_export import store_keys
from portal_export.metrics import Metrics, Settings
from tests.portal_export.test_metrics import health

DAYS = 520  # 1,040 day objects: the day listing takes two pages of 1,000 names
MISSING = (3, 4, 5)  # days of the window with no complete day
LISTINGS = 2 + 1 + len(MISSING)  # a scrape's: the day objects (two pages), _state/, each missing day's folder


def counted(seaweedfs, bucket, since, at_least, timeout=10.0):
    """The bucket's request counts once they have grown from `since` by `at_least` ({type or
    "A+B": n}); as they are at the timeout otherwise (the caller's assertion then shows them)."""
    deadline = time.monotonic() + timeout
    while True:
        now = seaweedfs.requests_by_type(bucket)
        grown = {kinds: sum(now.get(k, 0) - since.get(k, 0) for k in kinds.split("+")) for kinds in at_least}
        if all(grown[kinds] >= n for kinds, n in at_least.items()) or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


@pytest.mark.long
def test_a_scrape_of_years_of_days_in_a_bucket_costs_listings_and_no_get(seaweedfs, s3_data_dir):
    bucket, prefix = s3_data_dir.removeprefix("s3://").split("/", 1)
    client = seaweedfs.client()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    days = [today - datetime.timedelta(days=n) for n in range(1, DAYS + 1) if n not in MISSING]

    def put(d):
        client.put_object(Bucket=bucket, Key=f"{prefix}/{store_keys.day_records(d)}", Body=b'{"a": 1}\n')
        client.put_object(
            Bucket=bucket, Key=f"{prefix}/{store_keys.day_health(d)}", Body=json.dumps(health(4, 0)).encode()
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, days))
    metrics = Metrics(metrics_server.data_store(), Settings(configured_cap=4, max_unsolvable_ratio=0.25))

    before = seaweedfs.requests_by_type(bucket)
    first = {m.name: m.samples for m in metrics.collect()}
    # SeaweedFS counts a request once it has answered it: under load its counter may move a moment
    # after our scrape returned. Wait for the first scrape's own requests (each day's health, the
    # two HEADs, the listings below) to be counted, so none of them is charged to the second.
    after_first = counted(seaweedfs, bucket, before, {"LIST": LISTINGS, "GET+HEAD": len(days) + 2})
    assert first["portal_export_solves_total"] == [
        ({"outcome": "solved"}, 4 * len(days)),
        ({"outcome": "unsolvable"}, 0),
    ]
    assert first["portal_export_days_missing"] == [({}, len(MISSING))]
    # each day's health, once; the newest day's two objects' write time (a HEAD each: SeaweedFS's
    # counters name it GET)
    reads = sum(after_first.get(k, 0) - before.get(k, 0) for k in ("GET", "HEAD"))
    assert reads == len(days) + 2

    second = {m.name: m.samples for m in metrics.collect()}
    now = counted(seaweedfs, bucket, after_first, {"LIST": LISTINGS})
    used = {k: v - after_first.get(k, 0) for k, v in now.items()}
    used = {k: v for k, v in used.items() if v}
    print(f"store requests of a scrape of {len(days)} days, after the first: {used}")
    assert second == first
    assert used == {"LIST": LISTINGS}, used


@pytest.mark.unmeasured
def test_make_metrics_server_serves_a_bucket(cli, seaweedfs, s3_data_dir):
    from tests.ops.test_monitoring import CONTRACT, serving

    bucket, prefix = s3_data_dir.removeprefix("s3://").split("/", 1)
    client = seaweedfs.client()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    for n in (2, 1):
        d = today - datetime.timedelta(days=n)
        client.put_object(Bucket=bucket, Key=f"{prefix}/{store_keys.day_records(d)}", Body=b'{"a": 1}\n')
        client.put_object(
            Bucket=bucket, Key=f"{prefix}/{store_keys.day_health(d)}", Body=json.dumps(health(3, 1)).encode()
        )
    client.put_object(
        Bucket=bucket, Key=f"{prefix}/{store_keys.breaker('ab12')}", Body=b'{"code": "ERROR_WRONG_USER_KEY"}'
    )

    proc, url = serving(cli)
    text = requests.get(url, timeout=10).text
    assert {n for n in CONTRACT if f"\n{n}" in text or f"\n{n}{{" in text} == CONTRACT, text
    for line in [
        "portal_export_store_up 1.0",
        "portal_export_days_missing 33.0",
        'portal_export_solves_total{outcome="solved"} 6.0',
        'portal_export_solves_total{outcome="unsolvable"} 2.0',
        "portal_export_breaker_open 1.0",
        "portal_export_state_objects 1.0",
    ]:
        assert line + "\n" in text, (line, text)
    assert seaweedfs.env(s3_data_dir)["AWS_SECRET_ACCESS_KEY"] not in text + "".join(cli.output(proc))

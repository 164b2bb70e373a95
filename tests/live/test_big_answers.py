"""Answers of any size, through the real CLI: the records stream from the portal's answer to the
day file, so the day is exact and no process of the run grows with the answer (make bench-big
measures the same at 1.5 GB)."""

import datetime
import json

import pytest

from bench.big import PeakRSS, expected_digest, file_digest
from sandbox import REGIONS
from sandbox.big_answers import BigAnswer
from tests.helpers.speed import scaled

DAY = datetime.date(2026, 9, 1)
MB = 1024 * 1024
SIZES = {"east": 24 * MB, "west": 12 * MB}  # east JSON, west CSV
# Held whole (the JSON text, then its objects), the east answer takes several times its size;
# streamed, every process of the run stays near its size without it.
RSS_LIMIT_MB = 120


@pytest.mark.unmeasured
def test_megabytes_of_json_and_csv_stream_to_an_exact_day_and_no_process_grows(live, cli, data_dir):
    live.configure(answer_bytes=SIZES, variants={"west": ("csv",)})
    proc = cli.start("--workers", "2", "export", DAY)
    with PeakRSS(proc.pid, every=0.02) as sampled:
        code = proc.wait(timeout=scaled(120))
    assert code == 0, cli.output(proc)[1][-3000:]
    big = {r: BigAnswer(DAY.isoformat(), r, size, as_csv=r == "west") for r, size in SIZES.items()}
    want, rows = expected_digest(DAY, REGIONS, live, big)
    assert file_digest(data_dir / f"portal_records_{DAY}.jsonl") == want
    health = json.loads((data_dir / f"portal_records_{DAY}.health.json").read_text())
    assert health["rows"] == rows and health["regions"]["east"]["rows"] == big["east"].rows
    peaks = sorted((rss / MB for rss, _ in sampled.peaks.values()), reverse=True)
    assert len(peaks) >= 3 and peaks[0] <= RSS_LIMIT_MB, peaks  # the CLI and its task processes

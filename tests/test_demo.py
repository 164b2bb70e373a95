"""`make demo`: the whole job against the built-in sandbox, through the real CLI, as a new user runs it."""

import json
import os
import subprocess
import sys

import psutil

from .conftest import ROOT


def test_the_demo_exports_three_days_with_one_region_counted_unsolvable(tmp_path):
    env = {**os.environ, "PORTAL_VAR_DIR": str(tmp_path / "var")}
    run = subprocess.run(
        [sys.executable, "-m", "tasks.demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "demo: 3 days exported through RangeDaily --of DayExport (exit 0):" in run.stdout
    assert "peak 4 CaptchaAI threads in use (cap 4), 0 requests with the key in a URL" in run.stdout
    data = tmp_path / "var" / "demo" / "data"
    for day in ("2026-09-01", "2026-09-02", "2026-09-03"):
        health = json.loads((data / f"portal_records_{day}.health.json").read_text())
        assert health["solves"] == 3 and health["unsolvable_regions"] == ["east"], health
        assert len((data / f"portal_records_{day}.jsonl").read_text().splitlines()) == health["rows"] > 0


def test_the_s3_demo_exports_the_same_days_into_a_bucket_of_a_store_it_starts_and_stops(tmp_path):
    env = {**os.environ, "PORTAL_VAR_DIR": str(tmp_path / "var")}
    run = subprocess.run(
        [sys.executable, "-m", "tasks.demo", "--store", "s3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "demo: 3 days exported through RangeDaily --of DayExport (exit 0):" in run.stdout
    assert "demo: outputs in s3://portal-demo/export/" in run.stdout
    assert run.stdout.count("solves 3  unsolvable 1 (east)") == 3
    home = tmp_path / "var" / "demo-s3"
    assert not (home / "data").exists()  # nothing in a local data dir
    weeds = [p for p in psutil.process_iter(["cmdline"]) if str(home) in " ".join(p.info["cmdline"] or [])]
    assert weeds == []  # the store it started is stopped

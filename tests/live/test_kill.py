"""SIGKILL of a backfill (workers=4) at several points: its task processes die with it, no solve goes
on, nothing is left half-written, and a rerun completes every record exactly once without solving
an exported region again."""

import json
import os
import signal
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest

from sandbox import REGIONS
from tests import ROOT
from tests.helpers.runs import read_region, wait_for

START, STOP = "2026-04-01", "2026-04-05"
DAYS = ["2026-04-01", "2026-04-02", "2026-04-03", "2026-04-04"]
TMP = "-luigi-tmp-"  # luigi.LocalTarget's temporary names


def start_backfill(tmp_path, name):
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (the child process's output for as long as it runs)
    return subprocess.Popen(
        [sys.executable, "-m", "ops", "--workers", "4", "backfill", START, STOP],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def alive(proc):
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_processes(data_dir):
    """The live processes of a run into `data_dir`: the CLI and every task process it forked, whenever
    it forked it, share the environment it was started with."""
    return [
        p
        for p in psutil.process_iter(["environ"])
        if (p.info["environ"] or {}).get("PORTAL_DATA_DIR") == str(data_dir) and alive(p)
    ]


def final_files(data_dir):
    """{path: mtime} of every output under the data dir, temporary files left out."""
    return (
        {p: p.stat().st_mtime for p in data_dir.rglob("*") if p.is_file() and TMP not in p.name}
        if data_dir.exists()
        else {}
    )


def kill_run(proc, data_dir):
    """SIGKILL the run's own process only, as the OOM killer or `kill -9` would; then prove its task
    processes died with it: none is left to write anything more or to ask the sandbox anything more."""
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 1  # task processes were running
    before = final_files(data_dir)
    assert proc.pid in {p.pid for p in run_processes(data_dir)}  # the look below finds the run's processes
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()  # it is dead (the kernel signalled its children as it died): anything written later is an orphan's
    dead_at = time.time()  # file times come from a coarser clock: never later than this for earlier writes
    # every process of the run gone, those listed above and any forked since: no orphan polls or writes
    wait_for(lambda: not run_processes(data_dir), "the task processes to die with the run", 0.5, every=0.002)
    late = [p.name for p, mtime in final_files(data_dir).items() if before.get(p) != mtime and mtime > dead_at]
    assert late == []  # an orphaned RegionExport or DayExport would have finished its file after the kill
    return len(children)


def exported(data_dir):
    """(day, region) of every region target, after checking each is whole and right."""
    found = set()
    for path in (data_dir / "regions").glob("*/*.jsonl"):
        facts, records = read_region(path)  # whole, or not there at all
        assert facts["rows"] == len(records)
        found.add((path.parent.name, path.stem))
    return found


def assert_nothing_partial(sb, data_dir):
    for day, region in exported(data_dir):
        facts, records = read_region(data_dir / "regions" / day / f"{region}.jsonl")
        assert facts["status"] == "ok" and records == sb.expected_records(day, region)
    for day in DAYS:
        records = data_dir / f"portal_records_{day}.jsonl"
        health = data_dir / f"portal_records_{day}.health.json"
        if records.exists():
            assert records.read_text().splitlines() == expected_lines(sb, day)
        if health.exists():
            assert json.loads(health.read_text())["rows"] == len(expected_lines(sb, day))


def expected_lines(sb, day):
    return [json.dumps(r, ensure_ascii=False) for region in REGIONS for r in sb.expected_records(day, region)]


def solved_since(sb, t):
    """(day, region) of every CaptchaAI task submitted at sandbox time t or later."""
    found = []
    for task in sb.tasks():
        if task["submit_t"] >= t:
            query = parse_qs(urlsplit(task["pageurl"]).query)
            found.append((query["day"][0], query["region"][0]))
    return found


@pytest.mark.unmeasured
def test_sigkill_mid_solve_and_mid_write_then_a_rerun_completes_every_record_once(live, data_dir, tmp_path):
    live.configure(solve_s=100)  # 1 s solves: the kill lands mid-solve

    # 1. Killed while four solves are in flight.
    run = start_backfill(tmp_path, "run1")
    wait_for(lambda: sum(t["status"] == "pending" for t in live.tasks()) >= 4, "four solves in flight", 10, every=0.002)
    assert kill_run(run, data_dir) >= 4
    assert_nothing_partial(live, data_dir)
    assert exported(data_dir) == set()

    # 2. Killed right as the day files are being written (a temporary day file, or the first whole one).
    # Fast solves, and days of 2,400 records: writing one takes long enough to be caught at it, and
    # an orphaned DayExport would be seen finishing it. (Run 1 exported nothing, so no records change.)
    # The killed run's four CaptchaAI tasks still hold plan threads as this run starts, as after a real
    # crash: its first submits meet a busy plan, which must be retried, never taken for "no plan".
    live.configure(solve_s=5, records_per_region=(600, 600))
    run = start_backfill(tmp_path, "run2")
    day_names = [f"portal_records_{d}" for d in DAYS]

    def writing_days():
        return (
            [e.name for e in os.scandir(data_dir) if e.name.startswith(tuple(day_names))] if data_dir.exists() else []
        )

    wait_for(lambda: writing_days() or run.poll() is not None, "a day file", 20, every=0.002)
    assert run.poll() is None, (tmp_path / "run2.log").read_text()[-3000:]  # it ended before writing a day
    kill_run(run, data_dir)
    assert_nothing_partial(live, data_dir)
    done_before_rerun = exported(data_dir)
    assert 4 <= len(done_before_rerun) < 16

    # Stale temporary files of a killed run (and deliberately planted ones) block nothing.
    pending_day = next(d for d in DAYS if not (data_dir / f"portal_records_{d}.health.json").exists())
    (data_dir / "regions" / pending_day).mkdir(parents=True, exist_ok=True)
    for stale in (
        data_dir / f"portal_records_{pending_day}.jsonl{TMP}0000000001",
        data_dir / f"portal_records_{pending_day}.health.json{TMP}0000000002",
        data_dir / "regions" / pending_day / f"north.jsonl{TMP}0000000003",
    ):
        stale.write_text('{"records": [{"half": ')

    # 3. The rerun completes every day, solving only what was not exported.
    rerun_t = live.now()
    with open(tmp_path / "run3.log", "w") as log:
        code = subprocess.run(
            [sys.executable, "-m", "ops", "--workers", "4", "backfill", START, STOP],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=60,
        ).returncode
    assert code == 0, (tmp_path / "run3.log").read_text()[-3000:]
    for day in DAYS:
        assert (data_dir / f"portal_records_{day}.jsonl").read_text().splitlines() == expected_lines(live, day)
        health = json.loads((data_dir / f"portal_records_{day}.health.json").read_text())
        assert health["solves"] == 4 and health["rows"] == len(expected_lines(live, day))
    resolved = solved_since(live, rerun_t)
    assert len(resolved) == len(set(resolved))  # each region solved once by the rerun
    assert set(resolved) == {(d, r) for d in DAYS for r in REGIONS} - done_before_rerun

"""make bench-big: a day whose east region answers 1 GB of JSON and whose west answers 500 MB of CSV.

`python -m ops export DAY` runs against a sandbox that makes each answer while it sends it
(sandbox/big_answers.py). A sampler follows every process of the command (the CLI and the task
processes Luigi forks) for its peak RSS; the day file is checked byte for byte against the lines
the answers must give. Beside it, in the same run, the standard library parses the same bytes from
a file: `json.load` the JSON, `csv.reader` the CSV, each in a process of its own.
"""

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from sandbox import Sandbox
from sandbox.big_answers import BigAnswer

from . import config, runner

MB = 1024 * 1024
DAY = datetime.date(2026, 3, 1)
SIZES = {"east": 1024 * MB, "west": 500 * MB}  # east answers JSON, west CSV
RSS_LIMIT_MB = 300  # the contract's "Answers of any size"
TIME_RATIO = 3.0  # the export within 3x of the standard library parsing the same bytes
ROOT = Path(__file__).resolve().parent.parent
# Solves of 50 ms, polled to match: the run's time is the answers', not CaptchaAI's.
FAST_SOLVES = {"time_scale": 0.01, "solve": "fixed", "solve_s": 5.0}
FAST_POLLS = {"first_poll_s": 0.04, "poll_every_s": 0.02}
PARSE = {
    "json": "import json, sys; json.load(open(sys.argv[1], 'rb'))",
    "csv": "import csv, sys; sum(1 for _ in csv.reader(open(sys.argv[1], newline='', encoding='utf-8')))",
}


class PeakRSS(threading.Thread):
    """The peak RSS of a process and of each of its descendants, sampled every `every` s."""

    def __init__(self, pid, every=0.05):
        super().__init__(daemon=True)
        self.root, self.every = psutil.Process(pid), every
        self.stop = threading.Event()
        self.peaks = {}  # pid -> (peak RSS in bytes, what it runs)

    def run(self):
        while not self.stop.is_set():
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            for p in processes:
                try:
                    rss = p.memory_info().rss
                    what = "the CLI" if p.pid == self.root.pid else f"forked process {p.pid}"
                except psutil.Error:
                    continue
                self.peaks[p.pid] = (max(rss, self.peaks.get(p.pid, (0, ""))[0]), what)
            self.stop.wait(self.every)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


def expected_digest(day, regions, sb, big):
    """sha256 of the day file the answers must give (and its number of lines)."""
    digest, rows = hashlib.sha256(), 0
    for region in regions:
        if region in big:
            for block in big[region].lines():
                digest.update(block)
            rows += big[region].rows
        else:
            for r in sb.expected_records(day, region):
                digest.update((json.dumps(r, ensure_ascii=False) + "\n").encode())
                rows += 1
    return digest.hexdigest(), rows


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MB):
            digest.update(chunk)
    return digest.hexdigest()


def stdlib_parse(big, out):
    """Seconds the standard library takes to parse each answer's bytes from a file, and their sizes."""
    parsed = {}
    for region, answer in big.items():
        path = out / f"{region}.answer"
        with open(path, "wb") as f:
            for chunk in answer.chunks():
                f.write(chunk)
        kind = "csv" if answer.content_type.startswith("text/csv") else "json"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", PARSE[kind], str(path)], check=True)
        parsed[region] = {"kind": kind, "seconds": time.monotonic() - t0, "mb": path.stat().st_size / MB}
        path.unlink()
    return parsed


def export(sb, out, env):
    """`python -m ops export DAY`, sampled; (exit code, seconds, {pid: (peak MB, what)})."""
    with open(out / "log.txt", "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "ops", "export", DAY.isoformat()], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        with PeakRSS(proc.pid) as peaks:
            code = proc.wait()
        seconds = time.monotonic() - t0
    return code, seconds, {pid: (rss / MB, what) for pid, (rss, what) in peaks.peaks.items()}


def run(out_dir, sizes=None):
    """The export beside the standard library's parse; the record of the run."""
    out = Path(out_dir) / "big"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = out / "bench.cfg"
    cfg.write_text(config.layered_cfg(4, timings=FAST_POLLS))
    sizes = sizes or SIZES
    sandbox_cfg = config.sandbox_config(answer_bytes=sizes, variants={"west": {"csv"}}, **FAST_SOLVES)
    with Sandbox(sandbox_cfg) as sb:
        big = {r: BigAnswer(DAY.isoformat(), r, size, as_csv=r == "west") for r, size in sizes.items()}
        env = runner.cli_env(sb, str(out / "data"), cfg, "local", {})
        code, seconds, peaks = export(sb, out, env)
        day_file = out / "data" / f"portal_records_{DAY}.jsonl"
        want, rows = expected_digest(DAY, config.REGIONS, sb, big)
        exact = code == 0 and day_file.exists() and file_digest(day_file) == want
        health = json.loads((out / "data" / f"portal_records_{DAY}.health.json").read_text()) if code == 0 else {}
        day_mb = day_file.stat().st_size / MB if day_file.exists() else 0.0
        shutil.rmtree(out / "data", ignore_errors=True)
        parsed = stdlib_parse(big, out)
    return {
        "exit": code,
        "seconds": seconds,
        "exact": exact,
        "rows": rows,
        "health_rows": health.get("rows"),
        "day_mb": day_mb,
        "peaks": peaks,
        "parsed": parsed,
        "load": os.getloadavg()[0],
    }


def report(record):
    """The table of the run and its verdict: (ok, text)."""
    stdlib_s = sum(p["seconds"] for p in record["parsed"].values())
    peak = max((mb for mb, _ in record["peaks"].values()), default=0.0)
    lines = ["| process | peak RSS MB |", "|---|---|"]
    for mb, what in sorted(record["peaks"].values(), key=lambda peak: peak[0], reverse=True):
        lines.append(f"| {what} | {mb:.0f} |")
    lines += ["", "| answer | MB | standard library s |", "|---|---|---|"]
    for region, p in record["parsed"].items():
        lines.append(f"| {region} ({p['kind']}) | {p['mb']:.0f} | {p['seconds']:.1f} |")
    ok_rss, ok_time = peak <= RSS_LIMIT_MB, record["seconds"] <= TIME_RATIO * stdlib_s
    ok = record["exit"] == 0 and record["exact"] and record["health_rows"] == record["rows"] and ok_rss and ok_time
    verdict = [
        f"export: exit {record['exit']}, {record['seconds']:.1f} s, day file {record['day_mb']:.0f} MB, "
        f"{record['rows']} rows, byte for byte {'exact' if record['exact'] else 'NOT EXACT'}, health rows "
        f"{record['health_rows']}",
        f"peak RSS of any process {peak:.0f} MB (target <= {RSS_LIMIT_MB}): {'ok' if ok_rss else 'MISSED'}",
        f"time {record['seconds']:.1f} s against the standard library's {stdlib_s:.1f} s: ratio "
        f"{record['seconds'] / stdlib_s:.2f} (target <= {TIME_RATIO:g}): {'ok' if ok_time else 'MISSED'}",
    ]
    return ok, "\n".join(lines) + "\n\n```\n" + "\n".join(verdict) + "\n```"

"""Memory and CPU of one worker task process (a forked RegionExport child) while its solve waits.

Starts the sandbox in this process with a fixed solve time at real speed, runs the real CLI
(`python -m ops export DAY`, local scheduler, [core] workers so that each task runs in a forked
child) against it, and samples every child of the worker with psutil. For the RegionExport
children it reports RSS, USS (the pages the child owns alone: what one more in-flight solve
really costs, as a fork shares the rest with the worker copy-on-write), PSS, and the CPU seconds
spent between the CaptchaAI submit and the moment the solve is ready (the wait: polls and sleep).

    .venv/bin/python bench/measure_worker.py                      # one region, a 5 s solve, polls every 1 s
    .venv/bin/python bench/measure_worker.py --regions 4 --solve-s 20 --first-poll-s 15 --poll-every-s 5

Prints one JSON object. Uses a temporary data dir; touches nothing else.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import REGIONS, SANDBOX_KEY, Sandbox, SandboxConfig  # noqa: E402
from sandbox.portal_data import region_of_sitekey  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--solve-s", type=float, default=5.0, help="sandbox solve time (real seconds)")
    p.add_argument("--regions", type=int, default=1, choices=range(1, 5), help="regions in flight at once")
    p.add_argument("--first-poll-s", type=float, default=1.0)
    p.add_argument("--poll-every-s", type=float, default=1.0)
    p.add_argument("--sample-every-s", type=float, default=0.1)
    p.add_argument("--day", default="2026-09-01")
    return p.parse_args()


def sample(proc):
    """(rss, uss, pss, cpu user+system seconds) of one process, or None once it is gone."""
    try:
        with proc.oneshot():
            mem = proc.memory_full_info()
            cpu = proc.cpu_times()
            cmd = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    return {
        "rss": mem.rss,
        "uss": mem.uss,
        "pss": getattr(mem, "pss", None),
        "cpu": cpu.user + cpu.system,
        "cmd": " ".join(cmd),
    }


def mib(n):
    return None if n is None else round(n / 2**20, 1)


def main():
    args = parse_args()
    regions = ",".join(REGIONS[: args.regions])
    with (
        tempfile.TemporaryDirectory() as tmp,
        Sandbox(SandboxConfig(time_scale=1.0, solve="fixed", solve_s=args.solve_s)) as sb,
    ):
        cfg = Path(tmp) / "bench.cfg"
        cfg.write_text(
            f"[core]\nworkers = 4\n[captchaai]\nfirst_poll_s = {args.first_poll_s}\n"
            f"poll_every_s = {args.poll_every_s}\ntimeout_s = {args.solve_s + 60}\n"
            f"[portal]\nregions = {regions}\n"
        )
        env = {
            **os.environ,
            "CAPTCHAAI_API_KEY": SANDBOX_KEY,
            "CAPTCHAAI_API_BASE": sb.captchaai_url,
            "PORTAL_BASE_URL": sb.portal_url,
            "PORTAL_DATA_DIR": str(Path(tmp) / "data"),
            "LUIGI_CONFIG_PATH": str(cfg),
            "SCHEDULER": "local",
        }
        started = time.monotonic()
        cli = subprocess.Popen(
            [sys.executable, "-m", "ops", "export", args.day],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(Path(tmp) / "cli.err", "w"),  # noqa: SIM115 (the child process's output for as long as it runs)
        )
        worker = psutil.Process(cli.pid)
        samples = {}  # child pid -> [(sandbox time, sample), ...]
        worker_samples = []
        while cli.poll() is None:
            t = sb.now()
            s = sample(worker)
            if s:
                worker_samples.append((t, s))
            try:
                children = worker.children()
            except psutil.NoSuchProcess:
                break
            for child in children:
                s = sample(child)
                if s:
                    samples.setdefault(child.pid, []).append((t, s))
            time.sleep(args.sample_every_s)
        wall = time.monotonic() - started
        if cli.returncode != 0:
            sys.exit(f"export failed ({cli.returncode}):\n{(Path(tmp) / 'cli.err').read_text()[-3000:]}")
        err = (Path(tmp) / "cli.err").read_text()
        tasks = sb.tasks()

    # Luigi logs "[pid N] Worker ... running RegionExport(date=..., region=R)" for each task child;
    # the sandbox knows each CaptchaAI task's sitekey, hence its region.
    child_region = {
        int(pid): region
        for pid, region in re.findall(r"\[pid (\d+)\] Worker.* running\s+RegionExport\(date=[^,]+, region=(\w+)\)", err)
    }
    children = []
    for pid, series in samples.items():
        for task in tasks:
            if child_region.get(pid) != region_of_sitekey(task["googlekey"]):
                continue
            waiting = [(t, s) for t, s in series if task["submit_t"] <= t <= task["ready_t"]]
            if len(waiting) >= 2:
                (t0, first), (t1, last) = waiting[0], waiting[-1]
                children.append(
                    {
                        "pid": pid,
                        "region": child_region[pid],
                        "captchaai_task": task["id"],
                        "polls": task["polls"],
                        "wait_sampled_s": round(t1 - t0, 2),
                        "rss_mib": mib(statistics.median(s["rss"] for _, s in waiting)),
                        "uss_mib": mib(statistics.median(s["uss"] for _, s in waiting)),
                        "pss_mib": mib(statistics.median(s["pss"] for _, s in waiting))
                        if first["pss"] is not None
                        else None,
                        "cpu_s_during_wait": round(last["cpu"] - first["cpu"], 3),
                        "cpu_pct_during_wait": round(100 * (last["cpu"] - first["cpu"]) / max(t1 - t0, 1e-9), 2),
                        "cpu_s_child_total_at_last_sample": round(series[-1][1]["cpu"], 3),
                    }
                )
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "cpu_count": os.cpu_count(),
                "solve_s": args.solve_s,
                "regions": args.regions,
                "first_poll_s": args.first_poll_s,
                "poll_every_s": args.poll_every_s,
                "export_wall_s": round(wall, 2),
                "worker_rss_mib_max": mib(max(s["rss"] for _, s in worker_samples)),
                "worker_uss_mib_max": mib(max(s["uss"] for _, s in worker_samples)),
                "region_children": children,
                "log_tail": err.strip().splitlines()[-1],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

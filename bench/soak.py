"""make bench-soak: 60 nights of `python -m ops export DAY` in a row into one bucket of a SeaweedFS.

Through the sandbox at a tenth of real time; another consumer takes 2 of the plan's threads every
third night; night KILLED's run is SIGKILLed (its process group) once two solves are submitted,
and the same night runs it again (the rerun completes the day); night FAILED fails validation (two
regions unsolvable). `[portal] keep_state_days` is KEEP_S seconds, so pruning starts within the
first nights. Per night: the store's own request counters (SeaweedFS's, before and after: the
rerun of the killed night counted in), the wall time of the command(s), and the objects under
`_state/` after it (counted after the requests are read: not the night's).
"""

import contextlib
import datetime
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from portal_export import store_keys as keys
from sandbox import Sandbox

from . import config, runner
from .config import Case

NIGHTS = int(os.environ.get("SOAK_NIGHTS", 60))  # fewer for a quick look (the verdict needs 60)
FIRST_DAY = datetime.date(2026, 1, 1)
KEEP_S = 45.0  # about three nights
OTHER_EVERY = 3  # another consumer on nights 3, 6, 9, ...: as many in nights 6-15 as in 51-60
KILLED = 20
FAILED = 30
EARLY, LATE = range(6, 16), range(51, 61)
OBJECTS_SLACK = 10
RATIO = 1.10
ROOT = Path(__file__).resolve().parent.parent


def _cfg(path):
    text = config.layered_cfg(4)
    path.write_text(text.replace("[portal]\n", f"[portal]\nkeep_state_days = {KEEP_S / 86400!r}\n", 1))


def _export(day, env, log, kill_when=None):
    """One `python -m ops export DAY`; `kill_when()`: SIGKILL its process group once it is true."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops", "export", day.isoformat()],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if kill_when is not None:
        while proc.poll() is None and not kill_when():
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    if kill_when is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its forked tasks, if any outlived it
    return code


def run(out_dir):
    out = Path(out_dir) / "soak"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = out / "bench.cfg"
    _cfg(cfg)
    nights = []
    case = Case("soak", "luigi", NIGHTS, 4, store="s3")
    with runner.data_dir(case, out) as (where, store_env, store, requests), Sandbox(config.sandbox_config()) as sb:
        env = runner.cli_env(sb, where, cfg, "local", store_env)
        with open(out / "log.txt", "w") as log:
            for n in range(1, NIGHTS + 1):
                day = FIRST_DAY + datetime.timedelta(days=n - 1)
                log.write(f"\n=== night {n}: {day}\n")
                log.flush()
                other = None
                if n % OTHER_EVERY == 0:
                    other = runner.OtherConsumer(sb, sb.now() + 1.0, sb.now() + 6.0, 2)
                    other.start()
                if n == FAILED:
                    sb.configure(unsolvable_sitekeys=frozenset({"north", "south"}))
                before, t0 = sum(requests().values()), time.monotonic()
                codes = []
                if n == KILLED:  # once two solves of the night were submitted (the sandbox says: no store request)
                    submitted = len(sb.tasks())
                    codes.append(_export(day, env, log, lambda s=submitted: len(sb.tasks()) >= s + 2))
                codes.append(_export(day, env, log))
                wall = time.monotonic() - t0
                used = sum(requests().values()) - before
                if other is not None:
                    other.stop.set()
                    other.join()
                if n == FAILED:
                    sb.configure(unsolvable_sitekeys=frozenset())
                state = len(store.list(keys.STATE))
                nights.append(
                    {"night": n, "day": str(day), "exit": codes, "requests": used, "wall_s": wall, "state": state}
                )
                print(
                    f"night {n:2d}: exit {codes}, {used} requests, {wall:.1f} s, {state} objects under _state/",
                    flush=True,
                )
    return nights


def table(nights):
    by = {x["night"]: x for x in nights}
    lines = [
        "| nights | objects under _state/ after | requests per night (median, min-max) | wall s per night (median, min-max) |",
        "|---|---|---|---|",
    ]
    for start in range(1, NIGHTS + 1, 10):
        block = [by[n] for n in range(start, start + 10) if n in by]
        req = [b["requests"] for b in block]
        wall = [b["wall_s"] for b in block]
        lines.append(
            f"| {start}-{start + 9} | {block[-1]['state']} | {statistics.median(req):.0f} ({min(req)}-{max(req)}) "
            f"| {statistics.median(wall):.1f} ({min(wall):.1f}-{max(wall):.1f}) |"
        )
    return "\n".join(lines)


def verdict(nights):
    by = {x["night"]: x for x in nights}
    objects_ok = by[NIGHTS]["state"] <= by[10]["state"] + OBJECTS_SLACK
    req = [statistics.median(by[n]["requests"] for n in w) for w in (EARLY, LATE)]
    wall = [statistics.median(by[n]["wall_s"] for n in w) for w in (EARLY, LATE)]
    failed = [by[n]["exit"] for n in (KILLED, FAILED)]
    lines = [
        f"objects under _state/: {by[10]['state']} after night 10, {by[NIGHTS]['state']} after night {NIGHTS} "
        f"(target <= {by[10]['state'] + OBJECTS_SLACK}): {'ok' if objects_ok else 'MISSED'}",
        f"median requests per night: {req[0]:.0f} (nights 6-15), {req[1]:.0f} (nights 51-60), ratio "
        f"{req[1] / req[0]:.3f} (target <= {RATIO}): {'ok' if req[1] <= RATIO * req[0] else 'MISSED'}",
        f"median wall time per night: {wall[0]:.2f} s (nights 6-15), {wall[1]:.2f} s (nights 51-60), ratio "
        f"{wall[1] / wall[0]:.3f} (target <= {RATIO}): {'ok' if wall[1] <= RATIO * wall[0] else 'MISSED'}",
        f"night {KILLED}: exit codes {failed[0]} (killed, then run again); night {FAILED}: exit {failed[1]} "
        "(failed validation, as meant)",
    ]
    ok = objects_ok and req[1] <= RATIO * req[0] and wall[1] <= RATIO * wall[0]
    return ok, "\n".join(lines)

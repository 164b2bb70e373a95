"""make bench-timeline: the soak's nights (bench/soak.py) with what the metrics said after each step,
into bench/timeline.json, from which tests/repo/test_rules_timeline.py writes a `promtool test rules` file.

Night n exports day FIRST_DAY + n - 1 (`python -m ops export DAY`, the sandbox at the soak's time
scale, a local data dir): night KILLED is SIGKILLed and run again, night FAILED fails validation
(two regions unsolvable). On top of the soak: before night REFUSED CaptchaAI stops knowing the key
(the run fails, the key's breaker opens), and the next morning the operator rotates the key and
exports the day again; night RETRIED leaves one region unsolvable and the next morning the operator
runs `retry-unsolvable` on that day, the newest. The morning after FAILED, the runbook's
`retry-unsolvable` on the failed day. The 35 days before the first night are complete at the start.

After each step the metrics are read from the data dir as `make metrics-server` reads them, for two
"todays" (a step of night n is seen on UTC date day+1, and on day+2 until the next night, whatever
the host's time zone): the clock is the only thing a recording does not take from the run.
"""

import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from portal_export import store_keys as keys
from portal_export.metrics import Metrics
from portal_export.store import LocalStore, write_json
from sandbox import SANDBOX_KEY, Sandbox

from . import config, runner, soak

RECORDING = Path(__file__).resolve().parent / "timeline.json"
NIGHTS = soak.NIGHTS
KILLED, FAILED = soak.KILLED, soak.FAILED
REFUSED, RETRIED, SKIPPED = 40, 45, 50  # SKIPPED: no run that night (the host was down)
MORNING_H = 7  # the operator acts at local 10:00, 7 hours after the nightly run at 03:00
LOWERED = 0.2
NEW_KEY = "b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5"  # the rotated key: 32 characters


def seed(store, first, n):
    """The n days before `first` complete: the window is full before the first night."""
    for i in range(1, n + 1):
        day = first - datetime.timedelta(days=i)
        store.write(keys.day_records(day), b'{"region": "north"}\n')
        regions = {r: {"status": "ok", "transient_errors": []} for r in config.REGIONS}
        health = {"solves": 4, "unsolvable": 0, "unsolvable_ratio": 0.0, "p95_solve_seconds": 3.0, "rows": 4}
        write_json(store, keys.day_health(day), {**health, "submits": 4, "regions": regions})


def scrape(env, days):
    """{today: {series: value}} of the portal_export_* metrics at noon UTC of each of `days`, read by a
    process configured like `make metrics-server` (environment, layered config, the key in use)."""
    argv = [sys.executable, "-m", "bench.timeline", "--scrape", *map(str, days)]
    found = subprocess.run(argv, cwd=soak.ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(found.stdout)


def _scrape_main(days):
    """The metrics server's collector (store_up among its series), its clock at noon of each day."""
    from ops import metrics_server as served

    out = {}
    for text in days:
        noon = datetime.datetime.combine(datetime.date.fromisoformat(text), datetime.time(12), datetime.timezone.utc)
        collector = served.PortalExportCollector(
            lambda n=noon: Metrics(served.data_store(), served.settings(), clock=n.timestamp)
        )
        out[text] = {
            s.name
            + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items())) + "}" if s.labels else ""): s.value
            for family in collector.collect()
            for s in family.samples
            if s.name != "portal_export_scrape_duration_seconds"  # this process's time, not the deployment's
        }
    print(json.dumps(out))


class Recorder:
    def __init__(self, where, env):
        self.where, self.env = where, env
        self.steps = []

    def step(self, night, what, day, started, at_h, **facts):
        """A step done: what it was, its hour after night's local 03:00, when it started (real time),
        the metrics after it, on the two UTC dates night n's steps are seen on."""
        after_s = round(time.time() - started, 1)
        self.steps.append(
            {
                "night": night,
                "what": what,
                "day": str(day),
                "at_h": at_h,
                "started": started,
                "after_s": after_s,
                **facts,
                "metrics": scrape(self.env, [soak.FIRST_DAY + datetime.timedelta(days=night - 1 + d) for d in (1, 2)]),
            }
        )
        print(f"night {night:2d}: {what} {day}: {facts or ''}", flush=True)


def _night(sb, env, log, rec, n, day):
    t0 = time.time()
    codes = []
    if n == KILLED:
        submitted = len(sb.tasks())
        codes.append(soak._export(day, env, log, lambda s=submitted: len(sb.tasks()) >= s + 2))
    codes.append(soak._export(day, env, log))
    what = {KILLED: "killed night", FAILED: "failed night", REFUSED: "refused key"}.get(n, "night")
    rec.step(n, what, day, t0, 0, exit=codes)


def _morning(env, log, rec, n, day, what, argv, at_h=MORNING_H):
    """The operator's action the morning after night n; a retry-unsolvable is also recorded while
    the day's files are set aside."""
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops", *argv], cwd=soak.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    if argv[0] == "retry-unsolvable":
        records = Path(rec.where) / keys.day_records(day)
        while proc.poll() is None and records.exists():
            time.sleep(0.02)
        if proc.poll() is None:
            rec.step(n, f"{what} (going)", day, t0, at_h)
    rec.step(n, what, day, t0, at_h, exit=[proc.wait()])


def _lower_limit(cfg, rec, n, day, env):
    """The operator lowers [portal] max_unsolvable_ratio below the newest day's ratio."""
    t0 = time.time()
    cfg.write_text(cfg.read_text().replace("[portal]\n", f"[portal]\nmax_unsolvable_ratio = {LOWERED}\n", 1))
    rec.step(n, "lowered limit", day, t0, MORNING_H)


def run(out_dir):
    out = Path(out_dir) / "timeline"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = out / "bench.cfg"
    soak._cfg(cfg)
    where = str(out / "data")
    store = LocalStore(where)
    seed(store, soak.FIRST_DAY, 35)
    with Sandbox(config.sandbox_config(valid_keys=frozenset({SANDBOX_KEY, NEW_KEY}))) as sb:
        env = runner.cli_env(sb, where, cfg, "local", {"PORTAL_VAR_DIR": str(out / "var")})
        rec = Recorder(where, env)
        with open(out / "log.txt", "w") as log:
            for n in range(1, NIGHTS + 1):
                day = soak.FIRST_DAY + datetime.timedelta(days=n - 1)
                log.write(f"\n=== night {n}: {day}\n")
                log.flush()
                unsolvable = {FAILED: {"north", "south"}, RETRIED: {"east"}}.get(n, set())
                sb.configure(
                    unsolvable_sitekeys=frozenset(unsolvable),
                    valid_keys=frozenset({NEW_KEY} if n >= REFUSED else {SANDBOX_KEY, NEW_KEY}),
                )
                if n == SKIPPED:
                    rec.step(n, "skipped night", day, time.time(), 0, exit=[])
                else:
                    _night(sb, env, log, rec, n, day)
                sb.configure(unsolvable_sitekeys=frozenset())
                if n == FAILED:
                    _morning(env, log, rec, n, day, "retry-unsolvable", ["retry-unsolvable", str(day)])
                if n == RETRIED:
                    _lower_limit(cfg, rec, n, day, env)
                    _morning(env, log, rec, n, day, "retry-unsolvable", ["retry-unsolvable", str(day)], MORNING_H + 1)
                if n == REFUSED:
                    env["CAPTCHAAI_API_KEY"] = NEW_KEY
                    _morning(env, log, rec, n, day, "rotated key", ["export", str(day)])
                if n == SKIPPED + 1:
                    missed = day - datetime.timedelta(days=1)
                    _morning(env, log, rec, n, missed, "backfill", ["backfill", str(missed), str(day)])
    return {"first_day": str(soak.FIRST_DAY), "nights": NIGHTS, "steps": rec.steps}


def main():
    if sys.argv[1:2] == ["--scrape"]:
        return _scrape_main(sys.argv[2:])
    out = sys.argv[1] if len(sys.argv) > 1 else "var/bench"
    recording = run(out)
    RECORDING.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORDING.relative_to(Path.cwd()) if RECORDING.is_relative_to(Path.cwd()) else RECORDING}")


if __name__ == "__main__":
    main()

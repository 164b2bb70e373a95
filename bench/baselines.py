"""The two designs the per-region Luigi tasks are measured against, on the project's own core.

(a) `sequential`: the script a user might write instead: every region of every day in turn, in one
    process, with the core's export_region and its retry policy.
(b) `steps`: the seed design's scheduling: a day is one step exporting its four regions two at a
    time; at most two steps run at once (4 solves, the cap); a step is done only when all its
    regions are, and any transient failure re-runs the whole step (regions already delivered
    included: the step has no per-region output) after the core's backoff, `attempts` steps in all.

Run as `CAPTCHAAI_API_KEY=... python -m bench.baselines DESIGN FIRST_DAY N_DAYS --api-base URL
--portal-url URL` against a sandbox the caller owns and reads (bench/runner.py); prints
{"day/region": delivering task id} as JSON.
"""

import argparse
import datetime
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from portal_export.captchaai import CaptchaAI
from portal_export.errors import ExportError, TransientError
from portal_export.retry_policy import backoff, export_region

from . import config

ATTEMPTS = 4  # luigi.cfg [portal] attempts: per region in (a), per step in (b)


def count(lines):
    """The baselines' sink: the records are read and counted, not kept."""
    return sum(1 for _ in lines)


def make_solver(api_base, key):
    return CaptchaAI(
        key, api_base, timeout_s=config.TIMEOUT_S, first_poll_s=config.FIRST_POLL_S, poll_every_s=config.POLL_EVERY_S
    )


def sequential(days, portal_url, api_base, key):
    solver = make_solver(api_base, key)
    delivered = {}
    for day in days:
        for region in config.REGIONS:
            try:
                out = export_region(
                    day,
                    region,
                    portal_url,
                    solver,
                    sink=count,
                    attempts=ATTEMPTS,
                    retry_base_s=config.RETRY_BASE_S,
                    retry_jitter_s=config.RETRY_JITTER_S,
                )
            except ExportError as err:
                print(f"(a) {day} {region}: {err}", file=sys.stderr)
                continue
            if out.status == "ok":
                delivered[f"{day}/{region}"] = out.task_ids[-1]
    return delivered


def _region_once(day, region, portal_url, api_base, key):
    """One pass at a region inside a step: no retry of its own (an unsolvable task still gets the
    core's one resubmission). Each thread has its own client, as each step process had."""
    return export_region(day, region, portal_url, make_solver(api_base, key), sink=count, attempts=1)


def _step(day, portal_url, api_base, key, rng):
    wait = backoff(config.RETRY_BASE_S, config.RETRY_JITTER_S, rng)
    for attempt in range(1, ATTEMPTS + 1):
        with ThreadPoolExecutor(2) as pool:  # two regions at a time; the step waits for all four
            futures = {r: pool.submit(_region_once, day, r, portal_url, api_base, key) for r in config.REGIONS}
        errors = {r: f.exception() for r, f in futures.items() if f.exception() is not None}
        if not errors:
            return {f"{day}/{r}": f.result().task_ids[-1] for r, f in futures.items() if f.result().status == "ok"}
        if not all(isinstance(e, TransientError) for e in errors.values()) or attempt == ATTEMPTS:
            print(f"(b) {day}: step failed: {errors}", file=sys.stderr)
            return {}
        time.sleep(wait(SimpleNamespace(attempt_number=attempt)))
    return {}


def steps(days, portal_url, api_base, key):
    rng = random.Random(0)
    delivered = {}
    with ThreadPoolExecutor(2) as pool:  # at most two steps at once: 2 x 2 = the cap of 4
        for result in pool.map(lambda d: _step(d, portal_url, api_base, key, rng), days):
            delivered.update(result)
    return delivered


DESIGNS = {"sequential": sequential, "steps": steps}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.baselines", description=__doc__)
    parser.add_argument("design", choices=sorted(DESIGNS))
    parser.add_argument("first_day", type=datetime.date.fromisoformat)
    parser.add_argument("n_days", type=int)
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--portal-url", required=True)
    args = parser.parse_args(argv)
    key = os.environ["CAPTCHAAI_API_KEY"]  # as the CLI: from the environment only
    delivered = DESIGNS[args.design](config.days(args.first_day, args.n_days), args.portal_url, args.api_base, key)
    print(json.dumps(delivered))
    return 0


if __name__ == "__main__":
    sys.exit(main())

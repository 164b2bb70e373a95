"""`make demo-fleet`: three worker hosts on one luigid and one bucket; one of them dies mid-backfill.

It starts a SeaweedFS (S3) with a bucket, luigid, the sandbox (at a tenth of real time, or what
DEMO_TIME_SCALE says) and three worker hosts (sandbox/hosts.py: each its own folder, HOME and
TMPDIR, in a PID namespace of its own when `unshare` works here, else a process group of its own),
runs one 6-day backfill on all three, SIGKILLs host-a's whole process tree while it solves, and prints as it goes each host's
progress, luigid's `captchaai` resource (the visualiser's Resources page) and the solves in flight
at the sandbox; at the end which host took over what, the peak of concurrent solves against the
cap, and whether every day is exact and complete in the bucket. It stops everything it started,
on Ctrl-C too. Its files are under var/demo-fleet/ (SeaweedFS's data stay there, stopped).

Exit 0 when the cap held, nothing was lost and nothing but host-a's in-flight solves was paid twice.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import luigi.configuration
import requests

from sandbox import SANDBOX_KEY, Sandbox, SandboxConfig
from sandbox.hosts import Host, unshare_works
from tasks import config

from .demo import time_scale
from .luigid import ForegroundLuigid, wait_for
from .seaweedfs import SeaweedFS

BUCKET = "portal-fleet-demo"
START, STOP = "2026-10-01", "2026-10-07"  # six days: 24 regions
HOSTS = ("host-a", "host-b", "host-c")
WORKERS = 2  # per host: 6 workers over the three, more than the cap
VICTIM = "host-a"
KILL_AFTER = 6  # regions delivered in all before host-a dies: partway, with work left for the others
# luigid notices a dead host within seconds here (production: 60 s and 30 s, luigi.cfg says why)
FAST_DEATH = {"worker_disconnect_delay": 5, "retry_delay": 2, "prune_on_get_work": "true"}
HOST_CFG = """\
# Written by `make demo-fleet`: CaptchaAI's poll schedule at {scale:g} of real time.
[core]
workers = {workers}
[captchaai]
first_poll_s = {first_poll_s:g}
poll_every_s = {poll_every_s:g}
timeout_s = 30
[portal]
retry_base_s = {retry_s:g}
retry_jitter_s = {retry_s:g}
[scheduler]
retry_delay = {retry_delay}
[s3]
endpoint_url = {endpoint}
region_name = us-east-1
"""
LOG_LINE = re.compile(r" (running|done|failed)\s+RegionExport\(date=([\d-]+), region=([\w-]+)\)")
WORKER_ID = re.compile(r"Worker (Worker\(salt=\d+, [^)]*\))")
TAKEN = re.compile(r"takeover: re-enabled RegionExport\(date=([\d-]+), region=([\w-]+)\)")

Region = tuple[str, str]


def say(line: str) -> None:
    print(f"demo-fleet: {line}", flush=True)


def days() -> list[str]:
    d0, d1 = datetime.date.fromisoformat(START), datetime.date.fromisoformat(STOP)
    return [str(d0 + datetime.timedelta(days=i)) for i in range((d1 - d0).days)]


def host_regions(host: Host) -> dict[str, set[Region]]:
    """{running, done, failed: regions} from the host's Luigi log (running: started, not yet ended)."""
    seen: dict[str, set[Region]] = {"running": set(), "done": set(), "failed": set()}
    if host.proc is None:
        return seen
    for state, day, region in LOG_LINE.findall(host.output()[1]):
        seen[state].add((day, region))
    seen["running"] -= seen["done"] | seen["failed"]
    return seen


def submits(sb: Sandbox) -> Counter[Region]:
    """CaptchaAI tasks submitted per (day, region) of the page they were for."""
    pages = (parse_qs(urlsplit(t["pageurl"]).query) for t in sb.tasks())
    return Counter((q["day"][0], q["region"][0]) for q in pages)


def still_solving(sb: Sandbox) -> set[Region]:
    """Regions whose CaptchaAI task is not ready yet."""
    now = sb.now()
    pages = (parse_qs(urlsplit(t["pageurl"]).query) for t in sb.tasks() if t["ready_t"] > now)
    return {(q["day"][0], q["region"][0]) for q in pages}


def delivered(sb: Sandbox) -> Counter[Region]:
    """Tokens the portal accepted per (day, region): each is a delivery of that region's records."""
    accepted = (parse_qs(urlsplit(t["pageurl"]).query) for t in sb.tasks() if t["token_accepted"])
    return Counter((q["day"][0], q["region"][0]) for q in accepted)


def granted(url: str, host: Host) -> set[Region]:
    """The regions luigid lists as running on `host`'s worker (told by its whole id, which its log
    prints): also one it granted that the host died before it logged as running."""
    found = WORKER_ID.search(host.output()[1])
    try:
        resp = requests.get(f"{url}/api/task_list", params={"data": json.dumps({"status": "RUNNING"})}, timeout=5)
        resp.raise_for_status()
        tasks = resp.json()["response"].values()
    except (requests.RequestException, ValueError, KeyError, AttributeError):
        return set()
    return {
        (t["params"]["date"], t["params"]["region"])
        for t in tasks
        if found and t.get("worker_running") == found[1] and t.get("name") == "RegionExport"
    }


def captchaai_resource(url: str) -> str:
    """luigid's `captchaai` resource as its Resources page shows it: used/total (one quick request:
    Luigi's RPC client would retry a luigid that is gone for minutes)."""
    try:
        resp = requests.get(f"{url}/api/resource_list", timeout=2)
        resp.raise_for_status()
        found = next((r for r in resp.json()["response"] if r["name"] == "captchaai"), None)
    except (requests.RequestException, ValueError, KeyError, TypeError) as err:
        return f"? ({type(err).__name__})"
    return f"{found['num_used']}/{found['num_total']}" if found else "?"


def status_line(began: float, fleet: list[Host], url: str, sb: Sandbox, regions: int) -> str:
    parts = []
    for host in fleet:
        seen = host_regions(host)
        state = "killed" if host.killed else ("ended" if host.proc and host.proc.poll() is not None else "")
        parts.append(
            f"{host.name} {len(seen['done'])} done {len(seen['running'])} running{' ' + state if state else ''}"
        )
    threads = sb.stats()["threads"]
    return (
        f"{time.monotonic() - began:4.0f} s  "
        + " | ".join(parts)
        + f" || luigid captchaai {captchaai_resource(url)} used | solves now {threads['in_use']}, peak {threads['peak']}"
        + f" | {sum(delivered(sb).values())}/{regions} regions delivered"
    )


def check_bucket(weed: SeaweedFS, prefix: str, sb: Sandbox, regions: list[str]) -> list[str]:
    """The days that are not exactly their regions' records, each once, read back from the bucket."""
    client, wrong = weed.client(), []
    for day in days():
        try:
            body = client.get_object(Bucket=BUCKET, Key=f"{prefix}portal_records_{day}.jsonl")["Body"].read()
            client.head_object(Bucket=BUCKET, Key=f"{prefix}portal_records_{day}.health.json")
        except client.exceptions.ClientError as err:
            wrong.append(f"{day}: {err.response['Error']['Code']}")
            continue
        expected = [json.dumps(r, ensure_ascii=False) for region in regions for r in sb.expected_records(day, region)]
        if body.decode().splitlines() != expected:
            wrong.append(f"{day}: not exactly its records")
    return wrong


def run(root: Path, stack: contextlib.ExitStack) -> int:
    namespaced = unshare_works()
    scale = time_scale()
    sb = stack.enter_context(
        Sandbox(SandboxConfig(seed=11, time_scale=scale, solve="lognormal", solve_median_s=20.0, solve_sigma=0.3))
    )
    weed = SeaweedFS(root / "seaweedfs")
    stack.callback(weed.stop)
    weed.create_bucket(BUCKET)
    url = f"s3://{BUCKET}/export"
    cfg = luigi.configuration.get_config()
    for key, value in FAST_DEATH.items():  # luigid's config is written from this process's
        cfg.set("scheduler", key, str(value))
    luigid = ForegroundLuigid(root / "luigid")
    stack.callback(luigid.stop)
    cap = int(captchaai_resource(luigid.url).split("/")[1])
    regions = config.regions()
    total = len(days()) * len(regions)

    say(f"SeaweedFS (S3) at {weed.endpoint}, data dir {url}")
    say(
        f"luigid at {luigid.url}: cap [resources] captchaai = {cap}, worker_disconnect_delay "
        f"{FAST_DEATH['worker_disconnect_delay']} s, retry_delay {FAST_DEATH['retry_delay']} s (production: 60 s, 30 s)"
    )
    say(f"visualiser, Resources page: {luigid.url}/static/visualiser/index.html#tab=resources")
    say(f"sandbox CaptchaAI at {sb.captchaai_url} ({sb.config.threads} threads on the plan), portal at {sb.portal_url}")
    say(
        f"hosts: {', '.join(HOSTS)}, {WORKERS} workers each, "
        + (
            "each in its own PID and UTS namespace (unshare)"
            if namespaced
            else "each a process group of its own (unshare cannot make a PID namespace here)"
        )
    )
    shared = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "LUIGI_", "CAPTCHAAI_", "AWS_"))}
    shared.update(weed.env(url))
    shared.update(
        {
            "SCHEDULER": "central",
            "LUIGI_SCHEDULER_URL": luigid.url,
            "CAPTCHAAI_API_KEY": SANDBOX_KEY,
            "CAPTCHAAI_API_BASE": sb.captchaai_url,
            "PORTAL_BASE_URL": sb.portal_url,
            "ALERT_WEBHOOK_URL": "",  # a demo against the sandbox alerts nobody
        }
    )
    layered = HOST_CFG.format(
        scale=scale,
        first_poll_s=10 * scale,
        poll_every_s=3 * scale,
        retry_s=5 * scale,
        workers=WORKERS,
        retry_delay=FAST_DEATH["retry_delay"],
        endpoint=weed.endpoint,
    )
    fleet = [Host(name, root / "hosts", shared, layered, namespaced=namespaced) for name in HOSTS]
    for host in fleet:
        stack.callback(host.stop)
    say(f"backfill {START}..{STOP} ({len(days())} days, {total} regions) on all three hosts, {VICTIM} first")
    began = time.monotonic()
    victim = fleet[HOSTS.index(VICTIM)]
    victim.start("backfill", START, STOP)
    # the others once it solves: a loaded machine may start it seconds late, and the others would do
    # every region before it asked for one, leaving nothing to kill it with
    proc = victim.proc
    wait_for(
        lambda: proc is None or proc.poll() is not None or bool(host_regions(victim)["running"] & still_solving(sb)),
        60.0,
    )
    for host in fleet:
        if host is not victim:
            host.start("backfill", START, STOP)

    in_flight: set[Region] = set()
    held: set[Region] = set()
    next_line = 0.0
    while any(h.proc is not None and h.proc.poll() is None for h in fleet):
        if time.monotonic() >= next_line:
            say(status_line(began, fleet, luigid.url, sb, total))
            next_line = time.monotonic() + 2
        if (
            not victim.killed
            and victim.proc is not None
            and victim.proc.poll() is None
            and sum(delivered(sb).values()) >= KILL_AFTER
        ):
            # The sandbox's clock stands still from the look to the kill: a solve seen in flight cannot
            # end meanwhile, however loaded the machine and however short the solves.
            sb.pause_clock()
            try:
                solving = host_regions(victim)["running"] & still_solving(sb)
                if solving:
                    doomed = victim.kill()
                    victim.proc.wait(timeout=10)  # the kernel ends the namespace (or group) with it
                    held = host_regions(victim)["running"] | granted(luigid.url, victim)  # luigid has not noticed yet
                    in_flight = held & set(submits(sb))  # frozen: host-a is gone
                    say(
                        f"killed {VICTIM} (SIGKILL of its whole tree: {len(doomed)} processes) while it ran "
                        f"{len(held)} region(s), {len(in_flight)} with a solve in flight: "
                        + ", ".join(f"{d}/{r}" for d, r in sorted(held))
                    )
            finally:
                sb.resume_clock()
        if time.monotonic() - began > 300:
            say("the hosts did not finish within 300 s: stopping them")
            break
        time.sleep(0.2)
    say(status_line(began, fleet, luigid.url, sb, total))

    ok = True
    for host in fleet:
        if host.proc is None:
            continue
        code = host.proc.poll()
        if host.killed:
            say(f"{host.name}: killed")
            continue
        err = host.output()[1]
        taken = TAKEN.findall(err)
        say(
            f"{host.name}: exit {code}, ran {len(host_regions(host)['done'])} regions; took over "
            + (", ".join(f"{d}/{r}" for d, r in taken) if taken else "nothing")
        )
        ok = ok and code == 0
    if not victim.killed:
        say(f"{VICTIM} finished before it could be killed")
        ok = False

    stats = sb.stats()
    peak = stats["threads"]["peak"]
    say(
        f"peak {peak} concurrent solves at CaptchaAI (sandbox's count), cap {cap}: "
        + ("the cap held" if peak <= cap else "THE CAP WAS EXCEEDED")
    )
    ok = ok and peak <= cap
    per_region, deliveries = submits(sb), delivered(sb)
    twice = {region for region, n in per_region.items() if n > 1}
    say(
        f"{sum(per_region.values())} solves for {total} regions; solved twice: "
        + (", ".join(f"{d}/{r}" for d, r in sorted(twice)) or "none")
        + f" ({VICTIM}'s in-flight solves at its death: "
        + (", ".join(f"{d}/{r}" for d, r in sorted(in_flight)) or "none")
        + ")"
    )
    ok = ok and twice <= in_flight
    once = len(deliveries) == total and set(deliveries.values()) == {1}
    say(f"each of the {total} regions delivered " + ("once" if once else f"NOT once: {dict(deliveries)}"))
    wrong = check_bucket(weed, "export/", sb, regions)
    if wrong:
        say("days wrong in the bucket: " + "; ".join(wrong))
    else:
        say(f"every day exact and complete in {url}: {len(days())} of {len(days())} days, nothing lost")
    ok = ok and once and not wrong
    say(
        f"logs: {root / 'hosts'}/<host>/err.log; luigid's in {root / 'luigid'}; the store's data in {root / 'seaweedfs'}"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.demo_fleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    root = (Path(os.environ.get("PORTAL_VAR_DIR", "var")) / "demo-fleet").resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with contextlib.ExitStack() as stack:  # everything started is stopped, in reverse, on any exit
        try:
            code = run(root, stack)
        except KeyboardInterrupt:
            say("interrupted: stopping the hosts, luigid, SeaweedFS and the sandbox")
            code = 130
    say("stopped everything it started")
    return code


if __name__ == "__main__":
    sys.exit(main())

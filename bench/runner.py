"""One bench run in a subprocess against its own sandbox in this process.

The pipeline runs exactly as an operator runs it: `python -m ops backfill START STOP`, with the
bench's timings layered over luigi.cfg through LUIGI_CONFIG_PATH; a baseline runs as
`python -m bench.baselines`.

A sampler follows the command's process tree (the Luigi worker with its in-process scheduler, and
one forked process per running task) for CPU and memory.
"""

import contextlib
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from portal_export import store_keys as keys
from portal_export.caplog import CapLog
from portal_export.region_file import read_facts
from portal_export.store import LocalStore
from sandbox import SANDBOX_KEY, Sandbox
from sandbox.luigid import ForegroundLuigid
from sandbox.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS
from tasks.s3store import ObjectClient, S3Store

from . import config, fleet

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


class TreeSampler(threading.Thread):
    """Peak RSS/USS of the root and of any descendant, the peak of their sums over the whole tree
    (a host's memory), and the root's own CPU time, every `every` s."""

    def __init__(self, pid, every=0.25):
        super().__init__(daemon=True)
        self.root, self.every = psutil.Process(pid), every
        self.stop = threading.Event()
        self.root_cpu = 0.0
        self.root_rss = self.child_rss = self.child_uss = 0
        self.tree_rss = self.tree_uss = self.tree_processes = 0
        self.children_seen = set()

    def run(self):
        while not self.stop.is_set() and self.sample():
            self.stop.wait(self.every)

    def sample(self):
        try:
            t = self.root.cpu_times()
            self.root_cpu = t.user + t.system
            root = self.root.memory_full_info()
            self.root_rss = max(self.root_rss, root.rss)
            children = self.root.children(recursive=True)
        except psutil.Error:
            return False
        rss, uss, processes = root.rss, root.uss, 1
        for child in children:
            try:
                mem = child.memory_full_info()  # uss: what the fork does not share with its parent
            except psutil.Error:
                continue
            self.children_seen.add(child.pid)
            self.child_rss, self.child_uss = max(self.child_rss, mem.rss), max(self.child_uss, mem.uss)
            rss, uss, processes = rss + mem.rss, uss + mem.uss, processes + 1
        # RSS counts the pages a fork shares with its parent once per process; USS never counts them.
        if rss > self.tree_rss:
            self.tree_rss, self.tree_processes = rss, processes
        self.tree_uss = max(self.tree_uss, uss)
        return True


class OtherConsumer(threading.Thread):
    """Another consumer of the key: from `start` to `end` (sandbox clock) it holds `n` threads, taking
    each as soon as one is free, as a real one would (the sandbox lets it take only free threads)."""

    def __init__(self, sb, start, end, n):
        super().__init__(daemon=True)
        self.sb, self.start_t, self.end_t, self.n = sb, start, end, n
        self.stop = threading.Event()
        self.taken_at = []

    def run(self):
        self.stop.wait(max(0.0, self.start_t - self.sb.now()))
        while len(self.taken_at) < self.n and not self.stop.is_set() and self.sb.now() < self.end_t:
            if self.sb.occupy_threads(1, (self.end_t - self.sb.now()) / config.TIME_SCALE):
                self.taken_at.append(self.sb.now())
            else:
                self.stop.wait(0.01)


def region_outcomes(store, days, regions):
    """{"day/region": delivering task id} from the region targets the tasks wrote."""
    delivered = {}
    for day in days:
        for region in regions:
            data = store.read(keys.region(day, region))
            facts = read_facts(io.BytesIO(data)) if data is not None else None
            if facts is not None and facts["status"] == "ok":
                delivered[f"{day}/{region}"] = facts["task_ids"][-1]
    return delivered


def cap_changes(store):
    """The cap log the run's governor wrote (portal_export.caplog), if any."""
    return CapLog(store).changes()


@contextlib.contextmanager
def data_dir(case, out, weed=None):
    """(data dir, environment, store, request counter) of a run: out/data, or a bucket of a
    SeaweedFS of its own (started before the command, so its start-up is not the run's), or a new
    bucket of the running `weed` (the tests' session store: 8 s of start and stop saved)."""
    if case.store == "local":
        yield str(out / "data"), {}, LocalStore(out / "data"), None
        return
    own = weed is None
    weed = SeaweedFS(out / "seaweedfs") if own else weed
    bucket = "bench" if own else f"bench-{uuid.uuid4().hex[:12]}"
    try:
        url = f"s3://{weed.create_bucket(bucket)}/portal"
        client = ObjectClient(
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            endpoint_url=weed.endpoint,
            region_name=REGION,
        )
        env = {**weed.env(url), "PORTAL_VAR_DIR": str(out / "var")}
        before = weed.requests_by_type(bucket)  # the bucket's creation is not the run's

        def requests():
            return {k: n - before.get(k, 0) for k, n in weed.requests_by_type(bucket).items() if n > before.get(k, 0)}

        yield url, env, S3Store(url, client=client), requests
    finally:
        if own:
            weed.stop()


@contextlib.contextmanager
def luigid(home, cap):
    """A central scheduler on a free loopback port holding the cap in its own config (only luigid's
    counts), without task history (as before: its CPU is measured); yields (url, its TreeSampler)."""
    server = ForegroundLuigid(home, resources={"captchaai": cap}, history=False)
    try:
        sampler = TreeSampler(server.proc.pid)
        sampler.start()
        yield server.url, sampler
        sampler.sample()  # its CPU up to now, while it still runs
        sampler.stop.set()
        sampler.join()
    finally:
        server.stop()


def cli_env(sb, where, cfg, scheduler, store_env):
    """The CLI's environment against sandbox `sb`, data dir `where`, layered config `cfg`."""
    return {
        **os.environ,
        "CAPTCHAAI_API_KEY": SANDBOX_KEY,
        "CAPTCHAAI_API_BASE": sb.captchaai_url,
        "PORTAL_BASE_URL": sb.portal_url,
        "PORTAL_DATA_DIR": where,
        "LUIGI_CONFIG_PATH": str(cfg),
        "SCHEDULER": scheduler,
        "ALERT_WEBHOOK_URL": "",  # bench runs, faulted ones included, alert nobody
        **store_env,
    }


def _argv(case, api_base, portal_url):
    days = case.days
    if case.design == "luigi":
        stop = days[-1] + datetime.timedelta(days=1)
        return ["-m", "ops", "backfill", days[0].isoformat(), stop.isoformat()]
    return [
        "-m",
        "bench.baselines",
        case.design,
        days[0].isoformat(),
        str(len(days)),
        "--api-base",
        api_base,
        "--portal-url",
        portal_url,
    ]


def run(case, out_dir, weed=None):
    """Run one Case against its own sandbox; returns the record metrics.summarize() reads. An s3
    case runs in a SeaweedFS of its own, or in a bucket of its own of `weed` if given."""
    out = Path(out_dir) / case.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = out / "bench.cfg"
    cfg.write_text(config.layered_cfg(case.cap, case.workers, case.worker_overrides, case.timings))
    with contextlib.ExitStack() as stack:
        where, store_env, store, store_requests = stack.enter_context(data_dir(case, out, weed))
        sb = stack.enter_context(Sandbox(config.sandbox_config(case.faults, case.threads, **case.sandbox)))
        argv = _argv(case, sb.captchaai_url, sb.portal_url)
        env = cli_env(sb, where, cfg, case.scheduler, store_env)
        central = None
        if case.scheduler == "central":
            url, central = stack.enter_context(luigid(out / "luigid", case.cap))
            env["LUIGI_SCHEDULER_URL"] = url
        with open(out / "log.txt", "w") as log, open(out / "result.json", "w") as result:
            # The CLI's output is its log; a baseline prints its result on stdout and logs on stderr.
            streams = (
                {"stdout": log, "stderr": subprocess.STDOUT}
                if case.design == "luigi"
                else {"stdout": result, "stderr": log}
            )
            t_start, wall_start = sb.now(), time.time()
            other = None
            if case.other:
                other = OtherConsumer(sb, t_start + case.other[0], t_start + case.other[1], case.other[2])
                other.start()
            if case.hosts:
                hosts = fleet.run_hosts(case, argv[2:], env, out, cfg.read_text(), TreeSampler, sb.now)
                t_end, wall_end = sb.now(), time.time()
                exit_code = next((h["exit"] for h in hosts if h["exit"]), 0)
            else:
                proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, **streams)
                sampler = TreeSampler(proc.pid)
                sampler.start()
                _, status, usage = os.wait4(proc.pid, 0)  # rusage: the command and every task process
                t_end, wall_end = sb.now(), time.time()
                exit_code = os.waitstatus_to_exitcode(status)
                sampler.stop.set()
                sampler.join()
            if other is not None:
                other.stop.set()
                other.join()
        tasks, stats = sb.tasks(), sb.stats()
        requests_by_type = store_requests() if store_requests else None
        delivered = region_outcomes(store, case.days, config.REGIONS) if case.design == "luigi" else None
        changes = cap_changes(store)
    scheduler = {"cpu_s": central.root_cpu, "rss_mb": central.root_rss / MB} if central else None
    if delivered is None:
        text = (out / "result.json").read_text().strip()
        delivered = json.loads(text) if exit_code == 0 and text else {}
    if case.hosts:  # the hosts together: CPU summed, memory per process the largest of any host
        cpu = {"main_s": sum(h["main_cpu_s"] for h in hosts), "total_s": sum(h["total_cpu_s"] for h in hosts)}
        mem = {
            "main_rss_mb": max(h["main_rss_mb"] for h in hosts),
            "task_rss_mb": max(h["task_rss_mb"] for h in hosts),
            "task_uss_mb": max(h["task_uss_mb"] for h in hosts),
            "task_processes": sum(h["task_processes"] for h in hosts),
        }
    else:
        hosts = None
        cpu = {"main_s": sampler.root_cpu, "total_s": usage.ru_utime + usage.ru_stime}
        mem = {
            "main_rss_mb": sampler.root_rss / MB,
            "task_rss_mb": sampler.child_rss / MB,
            "task_uss_mb": sampler.child_uss / MB,
            "task_processes": len(sampler.children_seen),
        }
    record = {
        "name": case.name,
        "design": case.design,
        "cap": case.cap,
        "workers": case.workers,
        "timings": case.timings,
        "time_scale": case.sandbox.get("time_scale", config.TIME_SCALE),
        "concurrency": case.concurrency,
        "faults": case.faults,
        "days": case.n_days,
        "expected": case.n_days * len(config.REGIONS),
        "t_start": t_start,
        "t_end": t_end,
        "exit": exit_code,
        "argv": " ".join(argv),
        "tasks": tasks,
        "stats": stats,
        "delivered": delivered,
        "load": os.getloadavg()[0],  # the machine is shared: a busy minute shows here
        "cpu": cpu,
        "luigid": scheduler,
        "other": case.other and {"from_s": case.other[0], "until_s": case.other[1], "threads": case.other[2]},
        "other_taken_at": other.taken_at if other is not None else [],
        "cap_changes": changes,
        "store": case.store,
        "store_requests": requests_by_type,  # {type: count} the store answered during the run (s3 only)
        "wall": [wall_start, wall_end],
        "mem": mem,
        "hosts": hosts,  # per worker host of a fleet run (bench/fleet.py); None for one command
    }
    (out / "record.json").write_text(json.dumps(record))
    return record

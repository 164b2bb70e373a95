"""The worker hosts of a fleet run: each `python -m ops backfill` in a folder of its own.

A host has of its own what a worker machine of the deployment has: a working directory with its
copy of luigi.cfg and of the run's layered file, HOME, a var dir, TMPDIR, and (when we are root)
a hostname, through a UTS namespace, so luigid's worker list and failure records name it. It
shares only luigid, the object store and the sandbox, through the environment.

No PID namespace (sandbox/hosts.py adds one, to kill a host as a machine dies): the bench only starts
hosts, samples them and waits, so a plain subprocess in a process group of its own is enough, and
its process tree is the host's.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
# unshare --uts without --fork execs its command: the host's root process keeps the pid we started.
AS_HOST = (
    "import os, socket, sys; socket.sethostname(sys.argv[1]); "
    "os.execv(sys.executable, [sys.executable, '-m', 'ops', *sys.argv[2:]])"
)
DONE = re.compile(r"done\s+RegionExport\(")  # Luigi's line for each region this host's workers ran


def own_hostnames():
    """Whether each host can get a hostname of its own (root, and unshare on the PATH)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


class Host:
    """One worker host under `parent/name`; `start(argv)` runs `python -m ops *argv` there."""

    def __init__(self, name, parent, env, layered_cfg):
        self.name = name
        self.home = Path(parent) / name
        (self.home / "var").mkdir(parents=True)
        # Not under home: Luigi's worker binds an AF_UNIX socket in TMPDIR, whose path may not pass 107 bytes.
        self.tmp = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        shutil.copy(ROOT / "luigi.cfg", self.home / "luigi.cfg")  # what a deployed host has at its root
        (self.home / "site.cfg").write_text(layered_cfg)
        self.env = {
            **env,
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "PORTAL_VAR_DIR": str(self.home / "var"),
            "LUIGI_CONFIG_PATH": str(self.home / "site.cfg"),
        }
        self.log_path = self.home / "log.txt"
        self.proc = None

    def start(self, argv):
        if own_hostnames():
            command = ["unshare", "--uts", sys.executable, "-c", AS_HOST, self.name, *argv]
        else:
            command = [sys.executable, "-m", "ops", *argv]
        with open(self.log_path, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                command, cwd=self.home, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self.proc.pid

    def regions_run(self):
        return len(DONE.findall(self.log_path.read_text()))

    def stop(self):
        """Whatever still runs of the host (a bench run interrupted): its whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def host_names(n):
    return [f"host-{chr(ord('a') + i)}" for i in range(n)]


def run_hosts(case, argv, env, out, layered_cfg, sampler_class, clock):
    """Start `case.hosts` hosts at once, each sampled by a `sampler_class(pid)`; wait for all.
    Returns one dict per host: exit code, end time on `clock`, CPU and memory, regions it ran."""
    if case.scheduler != "central" or case.store != "s3":
        raise ValueError(f"{case.name}: hosts share only luigid and an object store (scheduler central, store s3)")
    hosts = [Host(name, out / "hosts", env, layered_cfg) for name in host_names(case.hosts)]
    samplers = []
    try:
        for host in hosts:
            sampler = sampler_class(host.start(argv))
            sampler.start()
            samplers.append(sampler)
        records = []
        for host, sampler in zip(hosts, samplers, strict=True):
            _, status, usage = os.wait4(host.proc.pid, 0)  # rusage: the host's command and its task processes
            ended = clock()
            host.proc.returncode = os.waitstatus_to_exitcode(status)
            sampler.stop.set()
            sampler.join()
            records.append(
                {
                    "name": host.name,
                    "exit": host.proc.returncode,
                    "t_end": ended,
                    "regions_run": host.regions_run(),
                    "main_cpu_s": sampler.root_cpu,
                    "total_cpu_s": usage.ru_utime + usage.ru_stime,
                    "main_rss_mb": sampler.root_rss / MB,
                    "task_rss_mb": sampler.child_rss / MB,
                    "task_uss_mb": sampler.child_uss / MB,
                    "task_processes": len(sampler.children_seen),
                    "tree_rss_mb": sampler.tree_rss / MB,
                    "tree_uss_mb": sampler.tree_uss / MB,
                    "tree_processes": sampler.tree_processes,
                }
            )
        return records
    finally:
        for host in hosts:  # an interrupted run leaves no host behind
            host.stop()

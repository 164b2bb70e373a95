"""Worker hosts on one machine, for the fleet tests and `make demo-fleet`: `python -m ops ...` in a
PID namespace and a folder of its own.

A host is what a worker machine of the deployment has: its own processes (a PID namespace:
`unshare --pid --fork --mount-proc`; an ordinary user makes it inside a user namespace of its own,
where it is root), its own working directory with its own
copy of luigi.cfg, layered file, var dir, HOME and TMPDIR, and its own hostname (a UTS namespace:
luigid's worker list, failure records and alerts name it). It shares with the other hosts only what
the environment names: luigid (LUIGI_SCHEDULER_URL), the data store (PORTAL_DATA_DIR and the
store's credentials) and the sandbox (CAPTCHAAI_API_BASE, PORTAL_BASE_URL).

Hosts may also be made as real fleets go wrong: `hostname=` gives several hosts one hostname
(containers on one machine's network, virtual machines cloned from one image), and `clock_s=` moves
the wall clock of every Python process of the host that many seconds (a `sitecustomize` module on
its PYTHONPATH shifts `time.time`, `time.time_ns` and `datetime`'s now; the monotonic clock and
sleeps are left alone, as a host's are when only its wall clock is wrong: Debian's libfaketime
0.9.10 breaks Python's `time.sleep` or its timed waits instead).

`kill()` is a machine dying: SIGKILL of the namespace's init, after which the kernel kills every
process in the namespace at once, task processes included.

Where `unshare` cannot make them (`namespaced=False`, the demo's fallback) a host is a process group of
its own instead: `kill()` SIGKILLs the whole group at once, and the hosts share the machine's
hostname (luigid tells their workers apart by pid).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def unshare(*kinds: str) -> list[str]:
    """`unshare` making namespaces of `kinds`: as root directly, otherwise inside a user namespace
    where this user is root."""
    return ["unshare", *([] if os.geteuid() == 0 else ["--user", "--map-root-user"]), *kinds]


UNSHARE = unshare("--pid", "--fork", "--mount-proc", "--uts", "--kill-child")
# The namespace's init names its host, then becomes `python -m ops` (the same pid 1).
AS_HOST = (
    "import os, socket, sys; socket.sethostname(sys.argv[1]); "
    "os.execv(sys.executable, [sys.executable, '-m', 'ops', *sys.argv[2:]])"
)
# A host without a namespace: `python -m ops` leads a process group (start_new_session).
AS_GROUP = "import os, sys; os.execv(sys.executable, [sys.executable, '-m', 'ops', *sys.argv[2:]])"
# A host whose wall clock is off: imported by every Python process started with it on PYTHONPATH.
SKEWED_CLOCK = """\
import datetime as _datetime
import time as _time

OFFSET_S = {offset!r}
_real_time, _real_time_ns = _time.time, _time.time_ns
_time.time = lambda: _real_time() + OFFSET_S
_time.time_ns = lambda: _real_time_ns() + int(OFFSET_S * 1e9)


class _Now(_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return _datetime.datetime.fromtimestamp(_time.time(), tz)

    @classmethod
    def utcnow(cls):
        return _datetime.datetime.fromtimestamp(_time.time(), _datetime.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls):
        return cls.now()


_datetime.datetime = _Now
"""


@dataclass
class HostRun:
    """How a host's command ended: unshare's exit code (1 when the namespace was killed), whether
    `kill()` killed it, and its output."""

    name: str
    code: int
    killed: bool
    out: str
    err: str

    def __repr__(self) -> str:
        return f"HostRun({self.name}, code={self.code}, killed={self.killed}, err=...{self.err[-2000:]!r})"


class Host:
    """One worker host. `start(*argv)` runs `python -m ops *argv` there in the background."""

    def __init__(
        self,
        name: str,
        parent: Path,
        env: dict[str, str],
        layered_cfg: str = "",
        namespaced: bool = True,
        hostname: str | None = None,
        clock_s: float = 0.0,
    ) -> None:
        """`name` names its folder, and its hostname unless `hostname` is given (namespaced hosts
        only); `clock_s`: how far its wall clock is ahead (negative: behind)."""
        self.name = name
        self.hostname = hostname or name
        self.namespaced = namespaced
        self.home = parent / name
        self.home.mkdir(parents=True)
        # TMPDIR short, linked from the host's folder: Luigi's completion cache (on with an s3://
        # data dir) has a socket under it, within 107 bytes (tasks/targets.check_tmpdir)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        (self.home / "tmp").symlink_to(self.tmp)
        (self.home / "var").mkdir()
        shutil.copy(ROOT / "luigi.cfg", self.home / "luigi.cfg")  # what a deployed host has at its root
        (self.home / "site.cfg").write_text(layered_cfg)
        self.env = {
            **env,
            "HOME": str(self.home),  # nothing of the operator's ~ (~/.aws, caches) is shared
            "TMPDIR": str(self.tmp),
            "PORTAL_VAR_DIR": str(self.home / "var"),
            "LUIGI_CONFIG_PATH": str(self.home / "site.cfg"),
        }
        if clock_s:
            (self.home / "clock").mkdir()
            (self.home / "clock" / "sitecustomize.py").write_text(SKEWED_CLOCK.format(offset=float(clock_s)))
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.home / "clock"), env.get("PYTHONPATH")]))
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False

    def start(self, *argv: str) -> Host:
        assert self.proc is None, f"{self.name} runs a command already"
        self.out_path, self.err_path = self.home / "out.log", self.home / "err.log"
        self.proc = subprocess.Popen(
            [*(UNSHARE if self.namespaced else []), sys.executable, "-c", AS_HOST if self.namespaced else AS_GROUP]
            + [self.hostname, *argv],
            cwd=self.home,
            env=self.env,
            stdout=open(self.out_path, "w"),  # noqa: SIM115 (the host's output for as long as it runs)
            stderr=open(self.err_path, "w"),  # noqa: SIM115 (the host's output for as long as it runs)
            start_new_session=True,
        )
        return self

    def init(self) -> psutil.Process:
        """The namespace's init (pid 1 inside): `python -m ops` itself, unshare's only child (or,
        without a namespace, the group's leader)."""
        assert self.proc is not None
        if not self.namespaced:
            return psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(self.proc.pid).children()):
            assert time.monotonic() < deadline and self.proc.poll() is None, f"{self.name}: no init"
            time.sleep(0.01)
        return children[0]

    def processes(self) -> list[psutil.Process]:
        """Every process of the host: its init and all below it."""
        init = self.init()
        return [init, *init.children(recursive=True)]

    def output(self) -> tuple[str, str]:
        return self.out_path.read_text(), self.err_path.read_text()

    def wait(self, timeout: float = 120) -> HostRun:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        return HostRun(self.name, code, self.killed, *self.output())

    def kill(self) -> list[psutil.Process]:
        """SIGKILL the namespace's init (or the whole process group), as a host dying would; returns
        the processes it had then."""
        doomed = self.processes()
        if self.namespaced:
            doomed[0].send_signal(signal.SIGKILL)
        else:
            os.killpg(doomed[0].pid, signal.SIGKILL)
        self.killed = True
        return doomed

    def terminate(self, grace_s: float) -> None:
        """SIGTERM to its init, as a service manager stops a host's run; SIGKILL to what still runs `grace_s` later."""
        assert self.proc is not None
        self.init().send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def stop(self) -> None:
        """Whatever still runs: SIGINT (Luigi ends its task processes), then the namespace's death;
        then its TMPDIR goes."""
        try:
            self._end()
        finally:
            if self.proc is not None and not self.namespaced:  # whatever its leader left in the group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _end(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.init().send_signal(signal.SIGINT)
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, psutil.NoSuchProcess, AssertionError):
            if self.namespaced:
                self.proc.kill()  # --kill-child: the namespace's init dies with unshare
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def unshare_works() -> bool:
    """A kernel that lets us make PID and UTS namespaces (as root, or in a user namespace)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*UNSHARE, "sh", "-c", "echo $$"], capture_output=True, text=True, timeout=10)
    return probe.returncode == 0 and probe.stdout.strip() == "1"

"""luigid in the foreground on a free loopback port, configured as `make scheduler` configures it
(ops/luigid.py): for the tests, the demos and the bench."""

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from ops.luigid import LUIGID, answers, environment, luigid_config

from .ports import PortTaken, free_port, on_free_ports, port_taken


class ForegroundLuigid:
    """luigid in the foreground on a free loopback port, configured as `make scheduler` configures
    it, its config, state, history and log under `home`: for the tests and the bench."""

    def __init__(
        self,
        home: Path,
        resources: Mapping[str, int] | None = None,
        history: bool = True,
        extra: Mapping[str, Mapping[str, object]] | None = None,
    ) -> None:
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_path, self.history_db, self.log = (
            self.home / "state.pickle",
            self.home / "history.db",
            self.home / "luigid.log",
        )
        self.cfg = luigid_config(self.home / "luigid.cfg", self.home, resources, history, extra)
        on_free_ports(self.start)

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [str(LUIGID), "--address", "127.0.0.1", "--port", str(port), "--state-path", str(self.state_path)],
                cwd=self.home,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches its owner, which stops it in order
            )
        # its imports take seconds on a loaded machine; an exit (a port taken) ends the wait at once.
        # Whatever answers must be this luigid: another worker's server may have taken the port first
        if (
            not wait_for(
                lambda: self.proc.poll() is not None or (listens(self.proc.pid, port) and answers(self.url)), 30.0
            )
            or self.proc.poll() is not None
        ):
            self.proc.kill()
            self.proc.wait()
            if port_taken(self.log.read_bytes()):
                raise PortTaken(f"luigid: port {port} was taken")
            raise RuntimeError(f"luigid did not start: {self.log.read_text()}")

    def environment(self) -> dict[str, str]:
        """luigid's environment, as `make scheduler` gives it."""
        return environment(self.cfg)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: luigid dumps its state file, then exits
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                # what would say why: its signal state (a blocked or ignored SIGTERM, one pending),
                # where the kernel has it waiting, and what it logged last
                state = process_state(self.proc.pid)
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(
                    f"luigid (pid {self.proc.pid}) still ran {timeout:.0f} s after SIGTERM: {state}; "
                    f"its log ends: {self.log.read_text()[-1500:]}"
                ) from None


def process_state(pid: int) -> str:
    """A process's state, threads and signal masks from /proc (empty where there is none)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""
    keep = ("State", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    return ", ".join([line.replace("\t", " ") for line in status if line.startswith(keep)] + [f"wchan {wchan}"])


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` listens on TCP `port`."""
    try:
        sockets = psutil.Process(pid).net_connections("tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone, or a zombie (its fds unreadable but to root)
        return False
    return any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

"""luigid in the foreground on a free loopback port, configured as `make scheduler` configures it
(ops/luigid.py): for the tests, the demos and the bench."""

import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ops.luigid import LUIGID, answers, environment, luigid_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
        cfg = luigid_config(self.home / "luigid.cfg", self.home, resources, history, extra)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [str(LUIGID), "--address", "127.0.0.1", "--port", str(port), "--state-path", str(self.state_path)],
                cwd=self.home,
                env=environment(cfg),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches its owner, which stops it in order
            )
        if not wait_for(lambda: answers(self.url), 30.0):  # its imports take seconds on a loaded machine
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"luigid did not start: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: luigid dumps its state file, then exits
            self.proc.wait(timeout=10)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

"""The Sandbox: both servers in one process around one shared state."""

from __future__ import annotations

import dataclasses
import threading

from .captchaai_app import CaptchaAIApp
from .config import HOST, SANDBOX_KEY, SandboxConfig
from .portal_app import PortalApp
from .portal_data import expected_csv_records, expected_records, report_records
from .state import SandboxState
from .wsgi_server import ServerThread


class Sandbox:
    """A local CaptchaAI service and partner portal; use as a context manager
    or call start() / stop(). All times are seconds since start() (monotonic)."""

    def __init__(self, config: SandboxConfig | None = None, **overrides):
        config = config or SandboxConfig()
        self._config = dataclasses.replace(config, **overrides) if overrides else config
        self._state: SandboxState | None = None
        self._servers: list[ServerThread] = []

    # ── lifecycle ────────────────────────────────────────────────────────────
    def start(self) -> Sandbox:
        if self._state is not None:
            raise RuntimeError("sandbox already started")
        self._state = state = SandboxState(self._config)
        try:
            self._servers = [
                ServerThread(HOST, self._config.captchaai_port, CaptchaAIApp(state)),
                ServerThread(HOST, self._config.portal_port, PortalApp(state)),
            ]
        except BaseException:
            for server in self._servers:
                server.server.server_close()
            raise
        for server in self._servers:
            server.start()
        return self

    def stop(self) -> None:
        if self._state is None:
            return
        self._state.stopping.set()  # release requests sleeping in a 'slow' fault
        # both at once: each stop waits up to one serve-loop poll interval
        stoppers = [threading.Thread(target=server.stop) for server in self._servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        self._servers, self._state = [], None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def _live(self) -> SandboxState:
        if self._state is None:
            raise RuntimeError("sandbox not started")
        return self._state

    # ── addresses ────────────────────────────────────────────────────────────
    @property
    def captchaai_url(self) -> str:
        """in.php and res.php live at its root."""
        return self._url(0)

    @property
    def portal_url(self) -> str:
        """/export lives here."""
        return self._url(1)

    def _url(self, which: int) -> str:
        _ = self._live  # raises if not started
        return self._servers[which].url

    # ── control and read-outs ────────────────────────────────────────────────
    @property
    def config(self) -> SandboxConfig:
        return self._state.cfg if self._state else self._config

    def configure(self, **changes) -> None:
        """Change config fields while running (faults restart their schedule indexes)."""
        self._live.configure(**changes)

    def occupy_threads(self, n: int, seconds: float, key: str = SANDBOX_KEY) -> int:
        """Another consumer on `key` holds n threads for `seconds` (scaled); returns how
        many it got (at most the free ones)."""
        return self._live.occupy_threads(n, seconds, key)

    def release_threads(self, key: str = SANDBOX_KEY, n: int | None = None) -> int:
        """Another consumer's threads on `key` (occupy_threads) free up now, `n` of them (None: all),
        those due to end first; returns how many."""
        return self._live.release_threads(key, n)

    def occupy_at_next_submit(self, n: int, seconds: float, key: str = SANDBOX_KEY, after: int = 0) -> None:
        """Another consumer on `key` takes the last n free threads (for `seconds`, scaled) just as a
        submit would use one, before it is answered, once `after` tasks exist: the worst moment for
        that submit, which is refused."""
        self._live.occupy_at_next_submit(n, seconds, key, after)

    def ambushed(self) -> int | None:
        """Threads the consumer armed by occupy_at_next_submit took; None until a submit came."""
        return self._live.ambushed()

    def stats(self) -> dict:
        return self._live.snapshot_stats()

    def reset_stats(self) -> None:
        self._live.reset_stats()

    def tasks(self) -> list[dict]:
        return self._live.task_list()

    def now(self) -> float:
        return self._live.now()

    def pause_clock(self) -> None:
        """Stop the sandbox's clock, so that a test can make its moves with no solve ending meanwhile
        whatever the machine's load (requests are still answered; the real clients' own timeouts run on)."""
        self._live.pause_clock()

    def resume_clock(self) -> None:
        """Start the clock again from where it stood."""
        self._live.resume_clock()

    def expected_records(self, day, region: str) -> list[dict]:
        """What an export of (day, region) delivers from this sandbox: its records_per_region, and
        the strings of the CSV file where the region answers CSV."""
        if {"csv", "csv-attachment"} & self.config.variants_of(region):
            return expected_csv_records(day, region, self.config.records_per_region)
        return expected_records(day, region, self.config.records_per_region)

    def report_records(self, day, market: str) -> list[dict]:
        """What the daily-report portal (shape "daily-report") answers for (day, market)."""
        return report_records(day, market, self.config.records_per_region)

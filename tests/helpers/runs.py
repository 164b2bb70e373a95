"""What a test reads of a run: the one wait, a region target, a finished CLI, a luigid to ask."""

import json
import time
from pathlib import Path

from sandbox.luigid import ForegroundLuigid
from tests.helpers.speed import scaled

MEASURED = "COVERAGE_PROCESS_CONFIG"  # coverage.py measures a subprocess with this in its environment


def wait_for(predicate, what, timeout=60, every=0.05):
    """`predicate()`'s first true value, asked every `every` s; fails naming `what` after `timeout` s
    on the development machine (tests/helpers/speed.py)."""
    deadline = time.monotonic() + scaled(timeout)
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return found


def read_region(path):
    """A region target's facts and records (its first line, then one record a line)."""
    first, *lines = Path(path).read_text().splitlines()
    return json.loads(first), [json.loads(line) for line in lines]


class CliRun:
    """One finished `python -m ops ...`: exit code, output, wall time."""

    def __init__(self, code, out, err, seconds):
        self.code, self.out, self.err, self.seconds = code, out, err, seconds

    def __repr__(self):
        return f"CliRun(code={self.code}, seconds={self.seconds:.2f}, err=...{self.err[-2000:]!r})"


class Luigid(ForegroundLuigid):
    """luigid on a free loopback port, configured as `make scheduler` does it; a test can
    query it (task_list, fetch_error) and stop it (luigid writes its state file on the way out).

    It keeps no task history unless a test asks (`history`), and runs without coverage: what it runs
    of ours, ops/metrics_server.py, tests/portal_export/test_metrics.py measures in-process. Each would about double
    luigid's CPU (SQLAlchemy's writes at every task event; coverage tracing Luigi's code)."""

    def __init__(self, home, extra=None, history=False):
        """`extra`: {section: {key: value}} added to its config, as an operator's /etc/luigi might."""
        super().__init__(home, history=history, extra=extra)
        self.env = {"SCHEDULER": "central", "LUIGI_SCHEDULER_URL": self.url}

    def environment(self):
        return {k: v for k, v in super().environment().items() if k != MEASURED}

    def stop(self, timeout=10.0):
        super().stop(timeout=scaled(timeout))  # its exit after the state's dump waits for a core on a loaded machine

    def rpc(self, method, **args):
        import json

        import requests

        resp = requests.get(f"{self.url}/api/{method}", params={"data": json.dumps(args)}, timeout=10)
        resp.raise_for_status()
        return resp.json()["response"]

    def task_list(self, status="", search=None):
        """{task_id: task} of one status ("" for every one)."""
        return self.rpc("task_list", status=status, upstream_status="", search=search)

    def error(self, task_id):
        """What the visualiser's error popup shows for a task: its on_failure text."""
        import json

        text = self.rpc("fetch_error", task_id=task_id)["error"] or ""
        return json.loads(text) if text.startswith('"') else text  # the worker sends it JSON-encoded

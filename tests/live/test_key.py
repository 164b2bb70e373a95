"""The API key appears in nothing a run produces, whatever fails: faulted days (network errors and
time-outs among them), an unsolvable day, a revoked key, the operator commands; under luigid."""

import json
from pathlib import Path

import pytest
import requests

from sandbox import FaultPlan, sitekey_for
from tests.helpers.runs import Luigid

KEY = "CanaryKey-5f0c1e7d93a2b84c6e1f0d"  # 32 characters, distinctive in any byte stream
assert len(KEY) == 32
FRAGMENTS = (KEY, KEY[:12], KEY[-12:])  # the key, or enough of it to matter
# Every submit a network error or a time-out: every region gives up after its attempts, with a traceback.
NO_SUBMIT = {"in.php": FaultPlan(rate=1.0, kinds=("reset", "slow"), slow_s=100)}
# Network errors and time-outs at random everywhere.
NETWORK_FAULTS = {
    "in.php": FaultPlan(rate=0.3, kinds=("reset", "slow", "html502", "plaintext"), slow_s=100),
    "res.php": FaultPlan(rate=0.3, kinds=("reset", "slow", "server_error"), slow_s=100),
    "portal_get": FaultPlan(rate=0.2, kinds=("reset", "slow"), slow_s=100),
    "portal_post": FaultPlan(rate=0.2, kinds=("reset", "html502"), slow_s=100),
}


def leaks(where, data):
    return [f"{where}: {fragment!r}" for fragment in FRAGMENTS if fragment.encode() in data]


@pytest.fixture
def central(tmp_path):
    """luigid with its task history, which is searched for the key too."""
    server = Luigid(tmp_path / "central", history=True)
    yield server
    server.stop()


@pytest.mark.unmeasured
def test_the_key_appears_in_nothing_a_run_produces(live, fast_cfg, central, cli, data_dir, tmp_path):
    live.configure(valid_keys=frozenset({KEY}))
    fast_cfg({"captchaai": {"http_timeout_s": 0.3}})  # a 'slow' fault (1 s) is a read time-out
    env = {"CAPTCHAAI_API_KEY": KEY, **central.env}

    runs = [cli("plan", **env)]
    live.configure(faults=NO_SUBMIT)  # regions give up after their attempts
    runs.append(cli("export", "2026-02-27", **env))
    # Network errors and time-outs everywhere, and east and west unsolvable: some regions deliver,
    # days fail validation.
    live.configure(faults=NETWORK_FAULTS, unsolvable_sitekeys=frozenset({sitekey_for("east"), sitekey_for("west")}))
    runs.append(cli("backfill", "2026-03-01", "2026-03-04", **env))
    live.configure(faults={}, unsolvable_sitekeys=frozenset(), valid_keys=frozenset())  # the key is revoked
    runs.append(cli("export", "2026-03-10", **env))  # key-level: the breaker trips, every region fails

    # The runs failed in all the ways meant: otherwise searching their output proves little.
    assert [r.code for r in runs] == [0, 30, 30, 30], runs
    everything = "".join(r.out + r.err for r in runs)
    for shown in (
        "NETWORK_ERROR",
        "gave up after 4 attempts",
        "ERROR_CAPTCHA_UNSOLVABLE",
        "TOO_MANY_UNSOLVABLE",
        "ERROR_KEY_DOES_NOT_EXIST",
        "Traceback (most recent call last)",
    ):
        assert shown in everything, shown
    assert live.stats()["key_in_query"] == 0  # never in a URL the sandbox saw

    found = []
    # What luigid shows: the task list of every status, each task's error popup, the task history.
    tasks = central.task_list("")
    assert len(tasks) >= 12
    found += leaks("/api/task_list", json.dumps(tasks).encode())
    errors = {task_id: central.error(task_id) for task_id in tasks}
    assert sum("Traceback" in e for e in errors.values()) >= 3
    for task_id, error in errors.items():
        found += leaks(f"/api/fetch_error {task_id}", error.encode())
    for page in ("/history", "/history/by_name/RegionExport", "/history/by_name/DayExport", "/tasklist"):
        found += leaks(page, requests.get(central.url + page, timeout=10).content)
    central.stop()  # luigid writes its state file on the way out
    assert central.state_path.exists() and central.history_db.exists()

    # Every byte on disk: the runs' captured output, the data and state dirs, luigid's home.
    files = [p for root in (tmp_path, data_dir, central.home) for p in Path(root).rglob("*") if p.is_file()]
    assert any(p.name == "state.pickle" for p in files) and any(p.parent.name == "_state" for p in files)
    for path in set(files):
        found += leaks(str(path), path.read_bytes())
    assert found == []

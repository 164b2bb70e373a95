"""`make metrics-server` as a process, checked by Debian's promtool; the shipped alert rules under
`promtool test rules`; the Grafana dashboard on the metrics the server serves."""

import datetime
import json
import re
import signal
import subprocess
import time

import pytest
import requests

from portal_export import store_keys
from portal_export.store import LocalStore, write_json
from tests import ROOT  # noqa: E402
from tests.helpers.programs import program
from tests.helpers.speed import scaled
from tests.portal_export.test_metrics import complete, health

MONITORING = ROOT / "monitoring"
RULES = MONITORING / "portal_export.rules.yml"


def promtool():
    return program("promtool", "prometheus")


def day(n):
    """n days before today (UTC): the server's window is the real one."""
    return datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=n)


def serving(cli, *argv, **env):
    """`python -m ops metrics-server --port 0 ...` started; (process, its /metrics URL)."""
    proc = cli.start("metrics-server", "--port", "0", *argv, **env)
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        found = re.search(r"serving (http://\S+/metrics)", cli.output(proc)[1])
        if found:
            return proc, found.group(1)
        assert proc.poll() is None, cli.output(proc)
        time.sleep(0.05)
    pytest.fail(f"the metrics server said nothing in 30 s: {cli.output(proc)}")


def test_the_alert_rules_pass_their_promtool_tests():
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 9 rules found" in check.stdout
    run = subprocess.run(
        [promtool(), "test", "rules", "portal_export.rules.test.yml"], cwd=MONITORING, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


# Each rule made looser fails its tests: tests/repo/test_rules_timeline.py.


def test_the_metrics_server_serves_every_contract_metric_promtool_checks_it_and_sigterm_stops_it(cli, data_dir):
    store = LocalStore(data_dir)
    complete(store, day(3), health(4, 0, rows=12))
    complete(store, day(2), health(3, 1, rows=9, errors=["HTTP_503"]))
    write_json(store, store_keys.failed_health(day(1)), health(2, 2))
    proc, url = serving(cli)
    assert url.startswith("http://127.0.0.1:")
    resp = requests.get(url, timeout=10)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = resp.text
    for line in [
        "portal_export_days_failed 1.0",
        'portal_export_solves_total{outcome="solved"} 7.0',
        'portal_export_solves_total{outcome="unsolvable"} 1.0',
        "portal_export_last_day_rows 9.0",
        "portal_export_last_day_unsolvable_ratio 0.25",
        "portal_export_cap_configured 4.0",
        "portal_export_cap_in_force 4.0",
        "portal_export_solves_in_flight 0.0",
        "portal_export_breaker_open 0.0",
        "portal_export_state_objects 0.0",
        "portal_export_store_up 1.0",
    ]:
        assert line + "\n" in text, (line, text)
    for name in ["last_success_timestamp_seconds", "last_complete_day_timestamp_seconds", "days_missing"]:
        assert re.search(rf"^portal_export_{name} \d", text, re.M), name
    assert "# TYPE portal_export_solves_total counter" in text

    lint = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    # the contract's names `days_missing` and `days_failed` count days; promtool reads "days" as a unit
    assert sorted(lint.stdout.splitlines() + lint.stderr.splitlines()) == [
        'portal_export_days_failed use base unit "seconds" instead of "days"',
        'portal_export_days_missing use base unit "seconds" instead of "days"',
    ]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=scaled(10)) == 0
    assert "metrics: stopped" in cli.output(proc)[1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--port", "99999"], "METRICS_PORT='99999': give a port number"),
        (["--port", "http"], "METRICS_PORT='http': give a port number"),
        (["--bind", "192.0.2.1"], "metrics-server cannot listen on 192.0.2.1 port 0: Cannot assign requested address"),
        (["--bind", ""], "METRICS_BIND is empty"),
    ],
)
def test_a_bad_port_or_address_is_one_line_and_exit_2(cli, argv, said):
    run = cli("metrics-server", "--port", "0", *argv, timeout=30)
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and said in run.err, run.err


def test_a_missing_bucket_is_one_line_before_serving(cli, seaweedfs):
    run = cli("metrics-server", "--port", "0", timeout=60, **seaweedfs.env("s3://no-such-bucket-here/p"))
    assert run.code == 2, run
    assert run.err.strip().splitlines() == [
        "error: STORE_NO_BUCKET: store s3://no-such-bucket-here/p: bucket 'no-such-bucket-here' does not exist"
    ]


CONTRACT = {
    "portal_export_last_success_timestamp_seconds",
    "portal_export_last_complete_day_timestamp_seconds",
    "portal_export_days_missing",
    "portal_export_days_failed",
    "portal_export_solves_total",
    "portal_export_last_day_unsolvable_ratio",
    "portal_export_last_day_p95_solve_seconds",
    "portal_export_last_day_rows",
    "portal_export_cap_configured",
    "portal_export_cap_in_force",
    "portal_export_solves_in_flight",
    "portal_export_breaker_open",
    "portal_export_state_objects",
}


@pytest.mark.unmeasured
def test_the_dashboard_shows_every_contract_metric_and_only_served_ones(cli):
    proc, url = serving(cli)
    served = set(re.findall(r"^# TYPE (\w+) ", requests.get(url, timeout=10).text, re.M))
    assert served >= CONTRACT
    served |= {f"luigi_task_{what}_total" for what in ("started", "done", "failed", "disabled")}  # luigid's own
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    used = {m for e in exprs for m in re.findall(r"\b(?:portal_export|luigi)_\w+", e)}
    assert used <= served, used - served
    assert used >= CONTRACT, CONTRACT - used

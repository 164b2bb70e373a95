"""A real Prometheus (Debian's) on loopback scrapes `make metrics-server` and luigid every second
while the real CLI backfills against the sandbox: three days, then a backfill over four in which
one day fails validation. Queried through its HTTP API, the values are what the runs did: the days,
the solves, the failing day, the cap the plan left, Luigi's own task counters, and the shipped rules
evaluated on it (docs/monitoring.md), and every query of the Grafana dashboard: each answers, the
failures panel shows the failing day, and no panel counts the deployment twice for its two endpoints."""

import datetime
import json
import re
import subprocess
import time

import pytest
import requests

from portal_export import store_keys
from portal_export.metrics import midnight_utc
from sandbox.ports import PortTaken, free_port, on_free_ports, port_taken
from tests.helpers.cfg import polls
from tests.helpers.programs import program
from tests.helpers.speed import scaled
from tests.ops.test_monitoring import MONITORING, RULES, serving

TASK_FAILED = 30  # luigi.cfg [retcode] task_failed
WAIT_S = 60  # a value Prometheus must come to (each scrape is 1 s apart; this machine may be loaded)


class Prometheus:
    def __init__(self, home, targets):
        binary = program("prometheus", "prometheus")
        home.mkdir(parents=True)
        scrape = [
            {"job_name": job, "static_configs": [{"targets": [target.split("//")[1].split("/")[0]]}]}
            for job, target in targets.items()
        ]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": scrape,
        }
        (home / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.binary, self.home = binary, home
        self.log = home / "prometheus.log"
        on_free_ports(self.start)

    def start(self):
        self.url = f"http://127.0.0.1:{free_port()}"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.home / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.home / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self.wait(lambda: requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200, "ready")
        except AssertionError:  # it exited
            if port_taken(self.log.read_bytes()):
                raise PortTaken(self.url) from None
            raise

    def wait(self, condition, what):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if condition():
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        pytest.fail(f"prometheus: no {what} within {WAIT_S} s; log: {self.log.read_text()[-2000:]}")

    def query(self, expr, at=None):
        """{frozenset of labels (without __name__): value} of an instant query now (or at Unix time `at`)."""
        params = {"query": expr} if at is None else {"query": expr, "time": at}
        resp = requests.get(f"{self.url}/api/v1/query", params=params, timeout=5)
        resp.raise_for_status()
        result = resp.json()["data"]["result"]
        return {
            frozenset((k, v) for k, v in r["metric"].items() if k != "__name__"): float(r["value"][1]) for r in result
        }

    def comes_to(self, expr, expected):
        """Wait until `expr` has exactly the series `expected`, {job: value} ("" for a series with no job);
        returns the last answer when it never does (so the assertion shows it)."""
        seen = {}

        def matches():
            nonlocal seen
            found = self.query(expr)
            seen = {dict(labels).get("job", ""): value for labels, value in found.items()}
            return seen == pytest.approx(expected)

        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not matches():
            time.sleep(0.25)
        return seen

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def prometheus(tmp_path):
    started = []

    def start(targets):
        started.append(Prometheus(tmp_path / "prometheus", targets))
        return started[-1]

    yield start
    for p in started:
        p.stop()


# Grafana's own variables as a dashboard refreshed every 15 s over the last hour would fill them in
GRAFANA = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600", "__range_ms": "3600000"}


def dashboard_queries():
    """(panel title, query) of every panel, the dashboard's variables substituted."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    own = {v["name"]: v.get("current", {}).get("value", "") for v in dashboard.get("templating", {}).get("list", ())}
    values = {**own, **GRAFANA}
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], target["expr"])
            out.append((panel["title"], expr))
    return out


def one_job(expr, job):
    """`expr` as Prometheus would answer it if it scraped the deployment through `job` alone."""
    return re.sub(r"\b(portal_export_\w+|luigi_task_\w+)\b(?![{\w])", rf'\1{{job="{job}"}}', expr)


def both(value):
    return {"portal-export": value, "luigid": value}


@pytest.mark.long
@pytest.mark.unmeasured
def test_prometheus_sees_the_days_the_solves_the_failing_day_and_the_cap(
    live, fast_cfg, cli, central, prometheus, data_dir
):
    # solves of 2 s, two regions a day, and a plan of 3 threads: 1 spare leaves 2, the cap in force
    live.configure(threads=3, solve_s=200.0)
    fast_cfg(
        {
            "portal": {"regions": "north,south"},
            "resources": {"captchaai": 4},
            "captchaai": {"plan_every_s": 1, **polls(2.0)},
        }
    )
    today = datetime.datetime.now(datetime.timezone.utc).date()
    d = [today - datetime.timedelta(days=n) for n in (6, 5, 4, 3)]
    server, metrics_url = serving(cli)
    prom = prometheus({"portal-export": metrics_url, "luigid": f"{central.url}/metrics"})
    assert prom.comes_to("portal_export_days_missing", both(35)) == both(35)  # the whole window, before any run

    first = cli("backfill", d[0], d[3], timeout=120, **central.env)
    assert first.code == 0, first
    health = json.loads((data_dir / store_keys.day_health(d[2])).read_text())
    written = max((data_dir / k).stat().st_mtime for k in (store_keys.day_health(d[2]), store_keys.day_records(d[2])))

    for expr, value in [
        ('portal_export_solves_total{outcome="solved"}', both(6)),
        ('portal_export_solves_total{outcome="unsolvable"}', both(0)),
        ("portal_export_days_missing", both(32)),
        ("portal_export_days_failed", both(0)),
        ("portal_export_last_complete_day_timestamp_seconds", both(midnight_utc(d[2]))),
        ("portal_export_last_success_timestamp_seconds", both(written)),
        ("portal_export_last_day_rows", both(health["rows"])),
        ("portal_export_last_day_p95_solve_seconds", both(health["p95_solve_seconds"])),
        ("portal_export_last_day_unsolvable_ratio", both(0)),
        ("portal_export_cap_configured", both(4)),
        ("portal_export_cap_in_force", both(4)),  # no run follows the plan now: the configured cap
        ("portal_export_solves_in_flight", both(0)),
        ("portal_export_breaker_open", both(0)),
        ("portal_export_store_up", both(1)),
        # the cap the plan left while the run went, and the solves in flight it held, over all scrapes
        ('min_over_time(portal_export_cap_in_force{job="portal-export"}[5m])', {"portal-export": 2}),
        ('max_over_time(portal_export_solves_in_flight{job="portal-export"}[5m])', {"portal-export": 2}),
        ('luigi_task_done_total{family="RegionExport"}', {"luigid": 6}),
        ('luigi_task_done_total{family="DayExport"}', {"luigid": 3}),
    ]:
        assert prom.comes_to(expr, value) == pytest.approx(value), expr

    # the next backfill covers the four days; the fourth fails validation (one of two regions unsolvable)
    live.configure(unsolvable_sitekeys=frozenset({"north"}))
    second = cli("backfill", d[0], today - datetime.timedelta(days=2), timeout=120, **central.env)
    assert second.code == TASK_FAILED, second
    assert (data_dir / store_keys.failed_health(d[3])).exists()

    for expr, value in [
        ("portal_export_days_failed", both(1)),
        ("portal_export_days_missing", both(32)),
        ('portal_export_solves_total{outcome="solved"}', both(6)),  # a failed day is no complete day
        ("portal_export_last_complete_day_timestamp_seconds", both(midnight_utc(d[2]))),
        # tasks fail once (retry_count = 1): luigid counts the failed day as disabled
        ('luigi_task_disabled_total{family="DayExport"}', {"luigid": 1}),
        ('luigi_task_done_total{family="DayExport"}', {"luigid": 3}),
        # the shipped rule saw it: pending for its 10 minutes, one alert for both targets
        ('ALERTS{alertname="PortalExportDaysFailed",alertstate="pending"}', {"": 1}),
    ]:
        assert prom.comes_to(expr, value) == pytest.approx(value), expr
    assert prom.query('ALERTS{alertname="PortalExportDaysMissing"}')  # 32 days missing: pending too
    # the run's cap of 2 put PortalExportCapBelowConfigured in pending while it went: with no run
    # going the cap in force is the configured one again, and the next evaluation drops it
    assert prom.comes_to("portal_export_cap_in_force", both(4)) == pytest.approx(both(4))
    others = 'count(ALERTS{alertname!~"PortalExportDays(Missing|Failed)"}) or vector(0)'
    assert prom.comes_to(others, {"": 0}) == {"": 0}, prom.query('ALERTS{alertname!~"PortalExportDays.*"}')

    # the dashboard on these data: each query answers; the failures panel shows the failed day
    queries = dashboard_queries()
    failures = [e for title, e in queries if "luigi_task_failed_total" in e]
    assert len(failures) == 1
    by_family = {}

    def shows_the_failed_day():
        nonlocal by_family
        by_family = {dict(labels)["family"]: value for labels, value in prom.query(failures[0]).items()}
        return by_family.get("DayExport", 0) >= 0.8

    prom.wait(shows_the_failed_day, "failed day on the failures panel")
    assert by_family == pytest.approx({"DayExport": 1, "RegionExport": 0}, rel=0.2), failures[0]
    at = time.time()
    for title, expr in queries:
        found = prom.query(expr, at)
        assert found, (title, expr)
        # no value changes when the deployment is scraped through both endpoints or one (the
        # endpoints' scrapes fall at other instants: increase() over each differs by a few percent)
        jobs = ["luigid"] if "luigi_task" in expr else ["portal-export", "luigid"]
        for job in jobs:
            alone = prom.query(one_job(expr, job), at)
            assert alone.keys() == found.keys(), (title, expr, job)
            for labels, value in found.items():
                assert value == pytest.approx(alone[labels], rel=0.1, abs=1e-9), (title, expr, job, labels)

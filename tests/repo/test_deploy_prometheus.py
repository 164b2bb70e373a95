"""Debian's `prometheus` package as docs/deploy.md (step 8) sets it up: deploy/prometheus.yml as its
/etc/prometheus/prometheus.yml, the rules beside it, deploy/prometheus.default as /etc/default/prometheus.
Debian's own binary, run as its unit runs it (`/usr/bin/prometheus $ARGS`) with those files placed in a
root of their own: `promtool check config` is content, the rules load, and both jobs (the metrics server,
luigid's /metrics) are up. Only what an operator edits is replaced: the ports."""

import shutil
import subprocess
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from sandbox.ports import PortTaken, free_port, on_free_ports, port_taken
from tests.helpers.deploy_files import DEPLOY
from tests.helpers.programs import program
from tests.live.test_prometheus import Prometheus
from tests.ops.test_monitoring import RULES, serving

pytestmark = pytest.mark.live


def placed(root, port, metrics_port, luigid_port):
    """The files where the docs install them, under `root`: {path as installed: path here}."""
    etc = root / "etc" / "prometheus"
    etc.mkdir(parents=True)
    (root / "etc" / "default").mkdir()
    config = (DEPLOY / "prometheus.yml").read_text()
    for default, ours in [("localhost:9090", f"localhost:{port}"), ("127.0.0.1:9464", f"127.0.0.1:{metrics_port}")]:
        assert default in config
        config = config.replace(default, ours)
    (etc / "prometheus.yml").write_text(config.replace("127.0.0.1:8082", f"127.0.0.1:{luigid_port}"))
    shutil.copy(RULES, etc / "portal_export.rules.yml")  # install -m 644 monitoring/portal_export.rules.yml ...
    default = (DEPLOY / "prometheus.default").read_text()
    assert "127.0.0.1:9090" in default
    (root / "etc" / "default" / "prometheus").write_text(default.replace("127.0.0.1:9090", f"127.0.0.1:{port}"))
    return etc / "prometheus.yml", root / "etc" / "default" / "prometheus"


def unit_args(default_file):
    """$ARGS of Debian's prometheus.service (EnvironmentFile=/etc/default/prometheus, ExecStart=/usr/bin/prometheus
    $ARGS): the variable's value, split on whitespace as systemd splits an unquoted $VAR."""
    for line in default_file.read_text().splitlines():
        if line.startswith("ARGS="):
            return line.removeprefix("ARGS=").strip('"').split()
    return []


class DebianPrometheus(Prometheus):
    """Prometheus as Debian's unit runs it; waits and stops as the live test's does."""

    def __init__(self, root, metrics_port, luigid_port):
        self.root, self.ports = root, (metrics_port, luigid_port)
        on_free_ports(self.start)

    def start(self):
        port = free_port()
        shutil.rmtree(self.root, ignore_errors=True)
        self.config, default_file = placed(self.root, port, *self.ports)
        self.url, self.log = f"http://127.0.0.1:{port}", self.root / "prometheus.log"
        # the paths Debian's binary defaults to, in this root: /etc/prometheus/prometheus.yml, /var/lib/prometheus/metrics2/
        argv = [program("prometheus", "prometheus"), *unit_args(default_file), f"--config.file={self.config}"]
        argv += [f"--storage.tsdb.path={self.root / 'var' / 'lib' / 'prometheus' / 'metrics2'}", "--log.level=warn"]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            self.wait(lambda: requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200, "ready")
        except AssertionError:
            self.stop()
            if port_taken(self.log.read_bytes()):
                raise PortTaken(self.url) from None
            raise

    def api(self, what):
        resp = requests.get(f"{self.url}/api/v1/{what}", timeout=5)
        resp.raise_for_status()
        return resp.json()["data"]


@pytest.mark.long
@pytest.mark.unmeasured
def test_debians_prometheus_loads_the_rules_and_scrapes_both_jobs_as_the_docs_install_them(tmp_path, cli, central):
    _, metrics_url = serving(cli)
    prometheus = DebianPrometheus(tmp_path / "root", urlsplit(metrics_url).port, urlsplit(central.url).port)
    try:
        check = subprocess.run(
            [program("promtool", "prometheus"), "check", "config", str(prometheus.config)],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0 and "SUCCESS: 9 rules found" in check.stdout, check.stdout + check.stderr

        shipped = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
        loaded = {}

        def rules_evaluated():
            nonlocal loaded
            loaded = {r["name"]: r["health"] for g in prometheus.api("rules")["groups"] for r in g["rules"]}
            return set(loaded) == shipped and set(loaded.values()) == {"ok"}

        prometheus.wait(rules_evaluated, f"rules loaded and evaluated (last seen: {loaded})")
        health = {}

        def both_jobs_up():
            nonlocal health
            health = {t["labels"]["job"]: t["health"] for t in prometheus.api("targets")["activeTargets"]}
            return health.get("portal-export") == health.get("luigid") == "up"

        prometheus.wait(both_jobs_up, f"portal-export and luigid up (last seen: {health})")
        values = requests.get(
            f"{prometheus.url}/api/v1/query", params={"query": "portal_export_days_missing"}, timeout=5
        ).json()["data"]["result"]
        assert {r["metric"]["job"]: r["value"][1] for r in values} == {"portal-export": "35", "luigid": "35"}
    finally:
        prometheus.stop()

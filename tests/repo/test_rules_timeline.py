"""The shipped alert rules judged on 60 recorded nights (bench/timeline.json, `make bench-timeline`),
turned by bench/rules_timeline.py into a `promtool test rules` file: the nightly run at local 03:00
at UTC-8, UTC and UTC+9, both endpoints scraped. Every alert fires by its promise after what each
step did and at no other time; each rule made looser (a longer `for:`, a laxer threshold) fails it."""

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from bench import rules_timeline
from bench.timeline import RECORDING
from tests.ops.test_monitoring import MONITORING, RULES, promtool

HAND_WRITTEN = MONITORING / "portal_export.rules.test.yml"

# each rule a little looser: (alert, text in its rule, looser text); the timeline judges these
LOOSER = [
    ("PortalExportNoSuccess", "for: 1h", "for: 2h"),
    ("PortalExportNoSuccess", "> 26 * 3600", "> 30 * 3600"),
    ("PortalExportDaysMissing", "for: 6h", "for: 12h"),
    ("PortalExportDaysMissing", "\n          > 0", "\n          > 1"),
    ("PortalExportDaysFailed", "for: 10m", "for: 20m"),
    ("PortalExportDaysFailed", "(portal_export_days_failed) > 0", "(portal_export_days_failed) > 1"),
    ("PortalExportBreakerOpen", "for: 1m", "for: 10m"),
    ("PortalExportBreakerOpen", "(portal_export_breaker_open) == 1", "(portal_export_breaker_open) == 2"),
    ("PortalExportUnsolvableRatioHigh", "labels:", "for: 2h\n        labels:"),
    (
        "PortalExportUnsolvableRatioHigh",
        "(portal_export_max_unsolvable_ratio)",
        "(portal_export_max_unsolvable_ratio) + 0.1",
    ),
    ("PortalExportExporterDown", "for: 5m", "for: 10m"),
    ("PortalExportExporterDown", "} == 0", "} < 0"),
]
# no step of the timeline meets these: the hand-written rule tests judge them
NOT_ON_THE_TIMELINE = [
    ("PortalExportNoSuccessYet", "for: 26h", "for: 30h"),
    ("PortalExportNoSuccessYet", "== 1 unless", "== 2 unless"),
    ("PortalExportCapBelowConfigured", "for: 1h", "for: 2h"),
    ("PortalExportCapBelowConfigured", "< on ()", "< on () -2 +"),
    ("PortalExportStoreDown", "for: 5m", "for: 10m"),
    ("PortalExportStoreDown", "== 0", "< 0"),
]


def rules():
    return yaml.safe_load(RULES.read_text())["groups"][0]["rules"]


def severity():
    return {r["alert"]: r["labels"]["severity"] for r in rules()}


def looser(text, alert, old, new):
    """The rules with `old` replaced by `new` in `alert`'s rule alone."""
    start = text.index(f"- alert: {alert}\n")
    end = text.find("- alert: ", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end]
    assert block.count(old) == 1, (alert, old)
    return text[:start] + block.replace(old, new) + text[end:]


def hand_written_for(alert):
    """The hand-written rule tests of `alert` alone (each test group judges one alert): a looser rule fails its own
    tests, and promtool need not evaluate the others' days at one-minute steps (5 s of CPU each time)."""
    tests = yaml.safe_load(HAND_WRITTEN.read_text())
    tests["tests"] = [g for g in tests["tests"] if {a["alertname"] for a in g["alert_rule_test"]} == {alert}]
    assert tests["tests"], alert
    return tests


def promtool_test(where, rules_text, test_file):
    where.mkdir(exist_ok=True)
    (where / "portal_export.rules.yml").write_text(rules_text)
    return subprocess.run([promtool(), "test", "rules", test_file], cwd=where, capture_output=True, text=True)


@pytest.fixture(scope="module")
def recording():
    return json.loads(RECORDING.read_text())


@pytest.fixture(scope="module")
def timelines(recording, tmp_path_factory):
    """{zone: directory holding timeline.test.yml}: the whole recording, the host in each zone."""
    out = {}
    for zone, tz in rules_timeline.TZS.items():
        where = tmp_path_factory.mktemp(zone.replace("+", "p").replace("-", "m"))
        test = rules_timeline.test_file(recording, "portal_export.rules.yml", severity(), tz)
        (where / "timeline.test.yml").write_text(json.dumps(test))
        out[zone] = where
    return out


def test_the_timeline_holds_each_alert_to_its_rule_s_for(timelines):
    """The checks hold each alert to what its rule waits (docs/monitoring.md), and each alert fires."""
    waits = {r["alert"]: r.get("for", "0s") for r in rules()}
    seconds = {"s": 1, "m": 60, "h": 3600}
    for alert, within in rules_timeline.FIRES_WITHIN.items():
        number, unit = re.fullmatch(r"(\d+)([smh])", waits[alert]).groups()
        wait = int(number) * seconds[unit]
        assert wait == within, alert
    assert set(waits) - set(rules_timeline.FIRES_WITHIN) == {r for r, _, _ in NOT_ON_THE_TIMELINE}
    for where in timelines.values():
        (group,) = yaml.safe_load((where / "timeline.test.yml").read_text())["tests"]
        checks = group["promql_expr_test"]
        fired = {re.search(r'alertname="(\w+)"', c["expr"])[1] for c in checks if c["exp_samples"]}
        assert fired == set(rules_timeline.FIRES_WITHIN)


def test_the_rules_hold_on_the_recorded_nights_at_utc_minus_8_utc_and_utc_plus_9(timelines):
    def judge(where):
        return promtool_test(where, RULES.read_text(), "timeline.test.yml")

    with ThreadPoolExecutor(2) as pool:
        for zone, run in zip(timelines, pool.map(judge, timelines.values()), strict=True):
            assert run.returncode == 0, (zone, run.stdout[-4000:] + run.stderr[-2000:])
            assert "SUCCESS" in run.stdout


def test_each_rule_made_looser_fails_the_rule_tests(recording, tmp_path):
    """Each on the nights around the first time its alert must fire (UTC), the others on the
    hand-written tests."""
    text = RULES.read_text()
    cases = []
    for i, (alert, old, new) in enumerate(LOOSER):
        night = rules_timeline.first_fired(recording, alert)
        test = rules_timeline.segment_file(recording, "portal_export.rules.yml", severity(), night - 1, night + 2)
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "timeline.test.yml").write_text(json.dumps(test))
        cases.append((i, alert, old, new, "timeline.test.yml"))
    for i, (alert, old, new) in enumerate(NOT_ON_THE_TIMELINE, len(LOOSER)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / HAND_WRITTEN.name).write_text(yaml.safe_dump(hand_written_for(alert)))
        cases.append((i, alert, old, new, HAND_WRITTEN.name))

    def judge(case):
        i, alert, old, new, test_file = case
        return promtool_test(tmp_path / str(i), looser(text, alert, old, new), test_file)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(judge, cases))
    for (_, alert, old, new, test_file), run in zip(cases, runs, strict=True):
        assert run.returncode != 0, f"{alert}: {old!r} -> {new!r} passed {test_file}"
        assert alert in run.stdout + run.stderr, (alert, old, run.stdout[-3000:])

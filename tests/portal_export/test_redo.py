"""A day redone (portal_export/redo.py): what `set_aside` takes out of the data dir, and the
counters of /metrics, which never decrease across it (portal_export/metrics.py), on a local data dir
and in a bucket; and `breaker_open`, which counts only a breaker of the key or login in use."""

import json
import shutil

import pytest

from ops import metrics_server as ops_metrics
from portal_export import redo
from portal_export import store_keys as keys
from portal_export.breaker import fingerprint
from portal_export.health import day_health
from portal_export.metrics import Metrics, Settings
from portal_export.store import LocalStore, write_json
from sandbox import REGIONS
from tests.portal_export.test_metrics import NOW, SETTINGS, day, values

COUNTERS = (
    "portal_export_solves_total{outcome=solved}",
    "portal_export_solves_total{outcome=unsolvable}",
    "portal_export_submits_total",
    "portal_export_refused_tokens_total",
    "portal_export_busy_waits_total",
    "portal_export_transient_errors_total{code=HTTP_503}",
)


def facts(status, ids, errors=(), refused=0, busy=0):
    """A region target's facts, as RegionExport writes them."""
    ok = status == "ok"
    return {
        "status": status,
        "rows": 2 if ok else 0,
        "records": [{"id": i} for i in range(2 if ok else 0)],
        "task_ids": list(ids),
        "solve_seconds": 4.0 if ok else None,
        "attempts": len(ids),
        "refused_tokens": refused,
        "transient_errors": list(errors),
        "idle_slot_seconds": 0.0,
        "busy_waits": busy,
    }


def run_regions(store, d, outcomes):
    """Region targets of `outcomes` ({region: facts}), as a run leaves them."""
    for region, f in outcomes.items():
        write_json(store, keys.region(d, region), f)


def judge(store, d):
    """DayExport's verdict on the day's region targets: the day's two files, or failed.health.json."""
    found = {r: json.loads(store.read(keys.region(d, r))) for r in REGIONS}
    health = day_health(d, REGIONS, found)
    if health["unsolvable_ratio"] > SETTINGS.max_unsolvable_ratio:
        write_json(store, keys.failed_health(d), health)
        return False
    store.delete(keys.failed_health(d))
    store.write(keys.day_records(d), b'{"id": 0}\n')
    write_json(store, keys.day_health(d), health)
    return True


@pytest.fixture(params=["local", "s3"])
def store(request):
    if request.param == "s3":
        request.getfixturevalue("s3_data_dir")
    return ops_metrics.data_store()


class Scrapes:
    """Every scrape of one metrics process, and of a fresh one (a restarted server) beside it;
    asserts that no counter ever went down."""

    def __init__(self, store):
        self.store = store
        self.metrics = Metrics(store, SETTINGS, clock=lambda: NOW)
        self.seen = []

    def __call__(self):
        found = values(self.metrics.collect())
        assert found == values(Metrics(self.store, SETTINGS, clock=lambda: NOW).collect())
        for name in COUNTERS:
            before = [s.get(name, 0) for s in self.seen]
            assert all(found.get(name, 0) >= b for b in before), (name, before, found.get(name))
        self.seen.append(found)
        return found


def test_retry_of_a_day_that_passed_keeps_every_counter_and_adds_the_new_solves(store):
    d = day(2)
    scrape = Scrapes(store)
    run_regions(store, d, {r: facts("ok", [f"{r}1"], errors=["HTTP_503"] if r == "north" else ()) for r in REGIONS[:3]})
    run_regions(store, d, {"west": facts("unsolvable", ["w1", "w2"], refused=1, busy=2)})
    assert judge(store, d)  # 1 of 4 unsolvable: the day passes
    first = scrape()
    assert [first[c] for c in COUNTERS] == [3, 1, 5, 1, 2, 1]

    done = redo.set_aside(store, d, REGIONS, complete_too=True)
    assert done.regions == ["west"]
    assert not store.exists(keys.day_health(d)) and not store.exists(keys.region(d, "west"))
    aside = [k for k in store.list(keys.region_dir(d)) if ".unsolvable-" in k]  # kept for the record
    assert len(aside) == 1 and aside[0].startswith(keys.region(d, "west") + ".unsolvable-")
    assert json.loads(store.read(aside[0]))["task_ids"] == ["w1", "w2"]
    while_rebuilt = scrape()  # the day's files are gone while west is solved again
    assert [while_rebuilt[c] for c in COUNTERS] == [3, 1, 5, 1, 2, 1]
    assert while_rebuilt["portal_export_days_missing"] == 35

    run_regions(store, d, {"west": facts("unsolvable", ["w3", "w4"])})  # unsolvable again
    assert judge(store, d)
    again = scrape()
    assert [again[c] for c in COUNTERS] == [3, 2, 7, 1, 2, 1]

    assert redo.set_aside(store, d, REGIONS, complete_too=True).regions == ["west"]
    scrape()
    run_regions(store, d, {"west": facts("ok", ["w5"])})
    assert judge(store, d)
    last = scrape()
    assert [last[c] for c in COUNTERS] == [4, 2, 8, 1, 2, 1]
    assert last["portal_export_last_day_unsolvable_ratio"] == 0
    assert redo.set_aside(store, d, REGIONS, complete_too=True).regions == []  # nothing unsolvable left


def test_a_healed_day_counts_once_complete_and_leaves_the_failed_days(store):
    d = day(3)
    scrape = Scrapes(store)
    run_regions(store, d, {r: facts("ok", [f"{r}1"]) for r in REGIONS[:2]})
    run_regions(store, d, {r: facts("unsolvable", [f"{r}1", f"{r}2"]) for r in REGIONS[2:]})
    assert not judge(store, d)
    failed = scrape()
    assert failed["portal_export_days_failed"] == 1
    assert [failed[c] for c in COUNTERS[:3]] == [0, 0, 0]  # a day that failed is no complete day

    assert redo.set_aside(store, d, REGIONS, older_than_s=3600).regions == []  # not yet due
    assert store.exists(keys.region(d, "east"))
    done = redo.set_aside(store, d, REGIONS)
    assert done.regions == ["east", "west"] and done.failed_at is not None
    assert [store.exists(keys.region(d, r)) for r in REGIONS] == [True, True, False, False]
    assert redo.set_aside(store, d, REGIONS).regions == []  # a second host finds nothing left to set aside
    scrape()

    run_regions(store, d, {r: facts("ok", [f"{r}3"]) for r in REGIONS[2:]})
    assert judge(store, d)
    healed = scrape()
    assert healed["portal_export_days_failed"] == 0
    # the two given up as unsolvable happened, and count once the day is complete
    assert [healed[c] for c in COUNTERS[:3]] == [4, 2, 8]


def test_a_region_solved_again_since_the_failure_is_not_set_aside(store):
    """Another host's redo under way: a target newer than the health that judged the day is not that health's."""
    d = day(4)
    run_regions(store, d, {r: facts("ok" if r == "north" else "unsolvable", [f"{r}1"]) for r in REGIONS})
    assert not judge(store, d)
    assert redo.set_aside(store, d, REGIONS).regions == ["south", "east", "west"]
    run_regions(store, d, {"south": facts("unsolvable", ["s2"])})  # south redone (unsolvable again) since
    assert redo.set_aside(store, d, REGIONS).regions == []
    assert json.loads(store.read(keys.region(d, "south")))["task_ids"] == ["s2"]


def test_a_redo_recorded_twice_counts_once(tmp_path):
    """Two hosts set the same day aside at once: both write a record of the same attempts."""
    d = day(2)
    store = LocalStore(tmp_path / "data")
    run_regions(store, d, {r: facts("ok" if r != "west" else "unsolvable", [f"{r}1"]) for r in REGIONS})
    assert judge(store, d)
    shutil.copytree(tmp_path / "data", tmp_path / "other")
    other = LocalStore(tmp_path / "other")
    assert redo.set_aside(store, d, REGIONS, complete_too=True).regions == ["west"]
    assert redo.set_aside(other, d, REGIONS, complete_too=True).regions == ["west"]
    for key in other.list(keys.REDONE):
        store.write(key, other.read(key))
    assert len(store.list(keys.REDONE)) == 2
    found = values(Metrics(store, SETTINGS, clock=lambda: NOW).collect())
    assert [found[c] for c in COUNTERS[:3]] == [3, 1, 4]


def test_a_garbled_redo_record_counts_nothing(tmp_path):
    store = LocalStore(tmp_path / "data")
    store.write(keys.redone(day(2), redo.new_stamp()), b"{not json")
    write_json(store, keys.redone(day(3), redo.new_stamp()), {"was_complete": True, "kept": {"north": "x"}})
    found = values(Metrics(store, SETTINGS, clock=lambda: NOW).collect())
    assert [found[c] for c in COUNTERS[:3]] == [0, 0, 0]


# ----------------------------------------------------------------------------------- the breaker

OLD_KEY, NEW_KEY = "a" * 32, "b" * 32


@pytest.mark.parametrize(
    ("in_env", "open_for", "expected"),
    [
        (NEW_KEY, [OLD_KEY], 0),  # rotated: the old key's breaker blocks nothing
        (NEW_KEY, [OLD_KEY, NEW_KEY], 1),
        (None, [OLD_KEY], 1),  # the key in use is not known here: every breaker counts
        (None, [], 0),
    ],
)
def test_breaker_open_counts_the_key_in_use(store, monkeypatch, in_env, open_for, expected):
    if in_env:
        monkeypatch.setenv("CAPTCHAAI_API_KEY", in_env)
    for key in open_for:
        write_json(store, keys.breaker(fingerprint(key)), {"code": "ERROR_WRONG_USER_KEY"})
    collector = ops_metrics.PortalExportCollector()
    found = {m.name: m.samples[0].value for m in collector.collect() if m.samples and not m.samples[0].labels}
    assert found["portal_export_breaker_open"] == expected
    assert found["portal_export_state_objects"] == len(open_for)  # every breaker is still there


def test_breaker_open_counts_the_login_in_use(tmp_path, monkeypatch):
    from tasks.region import portal_login

    store = LocalStore(tmp_path / "data")
    monkeypatch.setenv("CAPTCHAAI_API_KEY", NEW_KEY)
    monkeypatch.setenv("PORTAL_USERNAME", "exporter")
    monkeypatch.setenv("PORTAL_PASSWORD", "old-password")
    old_login = portal_login().breaker.key
    write_json(store, old_login, {"code": "PORTAL_LOGIN_REFUSED"})
    settings = ops_metrics.settings()
    assert values(Metrics(store, settings).collect())["portal_export_breaker_open"] == 1
    monkeypatch.setenv("PORTAL_PASSWORD", "new-password")  # the password was changed
    settings = ops_metrics.settings()
    assert values(Metrics(store, settings).collect())["portal_export_breaker_open"] == 0
    assert settings.breakers_in_use == {keys.breaker(fingerprint(NEW_KEY)), portal_login().breaker.key}


def test_without_the_key_the_metrics_server_says_what_breaker_open_counts(monkeypatch, caplog):
    collector = ops_metrics.PortalExportCollector()
    list(collector.collect())
    assert "CAPTCHAAI_API_KEY is not set here: portal_export_breaker_open counts every breaker" in caplog.text
    assert Settings(configured_cap=1, max_unsolvable_ratio=0.25).breakers_in_use is None


def test_make_prune_keeps_the_redone_records_and_make_state_counts_them(tmp_path):
    from portal_export import retention

    store = LocalStore(tmp_path / "data")
    write_json(store, keys.redone(day(2), redo.new_stamp()), {"was_complete": False, "set_aside": {}})
    policy = retention.Policy(now=NOW + 400 * retention.DAY_S, keep_s=retention.DAY_S)
    assert retention.prune_all(store, policy).get("redone-days", 0) == 0
    assert retention.survey(store)["redone-days"].count == 1

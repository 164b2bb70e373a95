"""The portal_export_* metrics computed from a data dir (portal_export/metrics.py, ops/metrics_server.py):
every contract metric against a data dir built by hand, what a scrape costs in store requests over
years of days, and a store that fails."""

import datetime
import os
import subprocess
import sys
import time

import pytest
from prometheus_client.exposition import generate_latest

from ops import metrics_server
from portal_export import store_keys
from portal_export.metrics import Metrics, Settings, midnight_utc
from portal_export.runs import Runs
from portal_export.state import new_run_id
from portal_export.store import LocalStore, StoreError, write_json

NOW = datetime.datetime(2026, 7, 10, 12, 0, tzinfo=datetime.timezone.utc).timestamp()
TODAY = datetime.date(2026, 7, 10)
SETTINGS = Settings(configured_cap=4, max_unsolvable_ratio=0.25, window_days=35)


def day(n):
    """n days before TODAY."""
    return TODAY - datetime.timedelta(days=n)


def health(solves, unsolvable, p95=3.5, rows=10, errors=(), submits=None, busy=0, refused=0):
    regions = {f"r{i}": {"status": "ok", "transient_errors": list(errors) if i == 0 else []} for i in range(solves)}
    regions.update({f"u{i}": {"status": "unsolvable", "transient_errors": []} for i in range(unsolvable)})
    return {
        "solves": solves,
        "unsolvable": unsolvable,
        "unsolvable_ratio": unsolvable / (solves + unsolvable),
        "p95_solve_seconds": p95,
        "rows": rows,
        "submits": solves + unsolvable if submits is None else submits,
        "refused_tokens": refused,
        "busy_waits": busy,
        "regions": regions,
    }


def complete(store, date, record, written=None):
    store.write(store_keys.day_records(date), b'{"a": 1}\n')
    write_json(store, store_keys.day_health(date), record)
    if written is not None:
        for key in (store_keys.day_records(date), store_keys.day_health(date)):
            os.utime(store.path(key), (written, written))


def values(found):
    """{name or name{labels}: value} of collect()'s metrics."""
    out = {}
    for m in found:
        for labels, value in m.samples:
            shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            out[m.name + (f"{{{shown}}}" if labels else "")] = value
    return out


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "data")


def test_every_contract_metric_from_a_data_dir_built_by_hand(store):
    # complete days: one outside the window, two in it (the newest has one unsolvable region of four)
    complete(store, day(60), health(4, 0, rows=7, errors=["ERROR_CAPTCHA_UNSOLVABLE", "HTTP_503"]), written=NOW - 9e6)
    complete(store, day(3), health(4, 0, rows=12, busy=2, refused=1, submits=6), written=NOW - 3e5)
    complete(store, day(2), health(3, 1, p95=8.25, rows=9, errors=["HTTP_503"]), written=NOW - 2e5)
    # the window's other days: one failed validation, one with a failure record, the rest never ran
    write_json(store, store_keys.failed_health(day(1)), health(2, 2))
    write_json(store, store_keys.region_failure(day(5), "north"), {"code": "PORTAL_HTTP_500"})
    store.write(store_keys.region(day(6), "north"), b"{}")  # a region done, the day not: missing, not failed
    store.write(store_keys.day_records(day(7)), b"")  # half a day (no health file): not complete
    # _state/: a breaker, the cap of a live run on this host, two solves in flight (one of a killed task: its submit
    # may have made a task, which holds a plan thread until its deadline)
    run = new_run_id()
    Runs(store).beat(run)
    write_json(store, store_keys.breaker("ab12"), {"code": "ERROR_WRONG_USER_KEY"})
    write_json(store, store_keys.CAP, {"cap": 2, "read_at": time.time(), "run": run, "t": time.time()})
    store.write(store_keys.mark("inflight", run, os.getpid(), 0), b"")
    dead = store_keys.mark("inflight", run, dead_pid(), 1)
    store.write(dead, b"")

    found = values(Metrics(store, SETTINGS, clock=lambda: NOW).collect())

    assert found == {
        "portal_export_last_success_timestamp_seconds": pytest.approx(NOW - 2e5),
        "portal_export_last_complete_day_timestamp_seconds": midnight_utc(day(2)),
        "portal_export_days_missing": 33,  # 35 days, two complete
        "portal_export_days_failed": 2,  # day(1), day(5)
        "portal_export_metrics_window_seconds": 35 * 86400,
        "portal_export_solves_total{outcome=solved}": 11,
        "portal_export_solves_total{outcome=unsolvable}": 1,
        "portal_export_submits_total": 14,
        "portal_export_refused_tokens_total": 1,
        "portal_export_busy_waits_total": 2,
        "portal_export_transient_errors_total{code=ERROR_CAPTCHA_UNSOLVABLE}": 1,
        "portal_export_transient_errors_total{code=HTTP_503}": 2,
        "portal_export_last_day_unsolvable_ratio": 0.25,
        "portal_export_last_day_p95_solve_seconds": 8.25,
        "portal_export_last_day_rows": 9,
        "portal_export_max_unsolvable_ratio": 0.25,
        "portal_export_cap_configured": 4,
        "portal_export_cap_in_force": 2,
        "portal_export_solves_in_flight": 2,
        "portal_export_breaker_open": 1,
        "portal_export_state_objects": 5,  # heartbeat, breaker, cap, two marks
    }
    assert store.exists(dead), "a scrape deletes nothing"


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_an_empty_data_dir_has_no_last_day_and_the_configured_cap(store):
    found = values(Metrics(store, Settings(configured_cap=3, max_unsolvable_ratio=0.5, window_days=7)).collect())
    assert "portal_export_last_success_timestamp_seconds" not in found  # absent before the first day
    assert "portal_export_last_day_rows" not in found
    assert found["portal_export_days_missing"] == 7
    assert found["portal_export_days_failed"] == 0
    assert found["portal_export_cap_in_force"] == 3
    assert found["portal_export_breaker_open"] == 0
    assert found["portal_export_solves_total{outcome=solved}"] == 0
    assert found["portal_export_state_objects"] == 0


def test_a_dead_runs_cap_is_not_in_force(store):
    # a run of another host whose heartbeat (and cap file) is older than the TTL
    old = time.time() - 600
    write_json(store, store_keys.CAP, {"cap": 1, "read_at": old, "run": "elsewhere-1", "t": old})
    found = values(Metrics(store, SETTINGS).collect())
    assert found["portal_export_cap_in_force"] == 4


def test_the_window_follows_the_clock(store):
    complete(store, day(1), health(4, 0))
    m = Metrics(store, SETTINGS, clock=lambda: NOW)
    assert values(m.collect())["portal_export_days_missing"] == 34
    m.clock = lambda: NOW + 86400  # a day later: day(1) is two days back, today - 1 is missing
    assert values(m.collect())["portal_export_days_missing"] == 34
    m.clock = lambda: NOW + 40 * 86400  # day(1) left the window
    assert values(m.collect())["portal_export_days_missing"] == 35


class Counting:
    """A LocalStore that counts its requests by kind."""

    def __init__(self, store):
        self.store = store
        self.calls = {}

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return method(*args, **kwargs)

        return counted


def test_a_scrape_of_years_of_days_reads_each_day_once(store):
    days = [TODAY - datetime.timedelta(days=n) for n in range(1, 3 * 365)]
    for d in days:
        complete(store, d, health(4, 0))
    for n in range(10, 20):  # ten days of the window missing: each costs one listing
        for suffix in (store_keys.day_records(day(n)), store_keys.day_health(day(n))):
            store.delete(suffix)
    counting = Counting(store)
    m = Metrics(counting, SETTINGS, clock=lambda: NOW)

    first = values(m.collect())
    assert first["portal_export_solves_total{outcome=solved}"] == 4 * (len(days) - 10)
    assert counting.calls["read"] == len(days) - 10  # each complete day's health, once

    counting.calls.clear()
    again = values(m.collect())
    assert again == first
    # the day listing, the _state/ listing, one listing per missing day of the window; no GET
    assert counting.calls == {"list": 2 + 10}

    complete(store, day(12), health(2, 2))  # a missing day completed since: read once
    counting.calls.clear()
    assert values(m.collect())["portal_export_solves_total{outcome=unsolvable}"] == 2
    assert counting.calls == {"list": 2 + 9, "read": 1}


class Failing:
    def list(self, prefix):
        raise StoreError("STORE_UNREACHABLE", "store s3://b/p: endpoint unreachable while listing")


def test_a_store_that_fails_is_store_up_0_and_nothing_else():
    collector = metrics_server.PortalExportCollector(lambda: Metrics(Failing(), SETTINGS))
    names = {m.name: m.samples[0].value for m in collector.collect()}
    assert names.keys() == {"portal_export_store_up", "portal_export_scrape_duration_seconds"}
    assert names["portal_export_store_up"] == 0


def test_the_exposition_has_no_date_in_any_label(store):
    complete(store, day(2), health(3, 1, errors=["HTTP_503"]))
    write_json(store, store_keys.failed_health(day(1)), health(2, 2))
    registry = metrics_server.CollectorRegistry()
    registry.register(metrics_server.PortalExportCollector(lambda: Metrics(store, SETTINGS, clock=lambda: NOW)))
    text = generate_latest(registry).decode()
    labels = {line[line.index("{") : line.index("}") + 1] for line in text.splitlines() if "{" in line}
    assert labels == {'{outcome="solved"}', '{outcome="unsolvable"}', '{code="HTTP_503"}'}, text
    assert "portal_export_store_up 1.0" in text


@pytest.mark.parametrize("port", ["", "x", "-1", "65536", "80a"])
def test_a_bad_port_is_refused(port):
    with pytest.raises(ValueError, match="METRICS_PORT="):
        metrics_server.parse_port(port)


def test_ports_are_numbers():
    assert metrics_server.parse_port("9464") == 9464
    assert metrics_server.parse_port("0") == 0


def test_another_hosts_solves_count_while_its_run_beats_or_their_deadline_is_ahead(store):
    alive, dead, gone = "otherhost-123-0000abcd", "otherhost-456-0000abcd", "otherhost-789-0000abcd"
    elsewhere = {"where": "another-boot-id another-pid-namespace"}  # its pids are not ours: its heartbeat tells
    write_json(store, store_keys.run(alive), elsewhere)  # a fresh heartbeat
    write_json(store, store_keys.run(dead), elsewhere)
    os.utime(
        store.path(store_keys.run(dead)), (time.time() - 600, time.time() - 600)
    )  # older than the TTL, by the store
    for n, run in enumerate([alive, alive, dead, gone]):
        store.write(store_keys.mark("inflight", run, 1000 + n, n), b"")
        if run != alive:  # left by runs that went, past the deadline of any task their submits made
            os.utime(store.path(store_keys.mark("inflight", run, 1000 + n, n)), (time.time() - 600,) * 2)
    complete(store, day(3), health(4, 0, rows=5))
    store.write(store_keys.day_records(day(2)), b"")
    store.write(store_keys.day_health(day(2)), b"{not json")  # complete, but its health says nothing
    store.write(f"{store_keys.DAY_PREFIX}notes.txt", b"")  # no day object
    found = values(Metrics(store, SETTINGS, clock=lambda: NOW).collect())
    assert found["portal_export_solves_in_flight"] == 2
    assert found["portal_export_solves_total{outcome=solved}"] == 4
    assert found["portal_export_last_complete_day_timestamp_seconds"] == midnight_utc(day(2))
    assert found["portal_export_last_day_unsolvable_ratio"] == 0
    assert "portal_export_last_day_p95_solve_seconds" not in found


def test_luigids_collector_counts_a_task_that_failed_before_it_ran():
    from types import SimpleNamespace

    from ops.metrics_server import LuigidMetrics

    collector = LuigidMetrics()
    never_ran = SimpleNamespace(family="RegionExport", params={}, time_running=None, updated=1.0)
    collector.handle_task_failed(never_ran)  # Luigi's own collector raises TypeError here
    collector.handle_task_disabled(never_ran, None)
    ran = SimpleNamespace(family="RegionExport", params={}, time_running=1.0, updated=3.5)
    collector.handle_task_failed(ran)
    assert 'luigi_task_execution_time_seconds{family="RegionExport"} 2.5' in collector.generate_latest().decode()
    ran.updated = 5.0
    collector.handle_task_disabled(ran, None)  # one that ran: Luigi's own handling, its time too
    text = collector.generate_latest().decode()
    assert 'luigi_task_failed_total{family="RegionExport"} 2.0' in text
    assert 'luigi_task_disabled_total{family="RegionExport"} 2.0' in text
    assert 'luigi_task_execution_time_seconds{family="RegionExport"} 4.0' in text
    assert "portal_export_store_up 1.0" in text  # the data dir's metrics ride along


def test_a_day_written_again_is_read_again(store):
    """A day whose files went and came back (deleted by hand and exported again) is read anew. A redo
    by retry-unsolvable or healing keeps its counters too: tests/portal_export/test_redo.py."""
    complete(store, day(2), health(3, 1, rows=9))
    m = Metrics(store, SETTINGS, clock=lambda: NOW)
    assert values(m.collect())["portal_export_last_day_rows"] == 9
    for key in (store_keys.day_records(day(2)), store_keys.day_health(day(2))):
        store.delete(key)
    assert values(m.collect())["portal_export_days_missing"] == 35
    complete(store, day(2), health(4, 0, rows=11))
    found = values(m.collect())
    assert found["portal_export_solves_total{outcome=solved}"] == 4
    assert found["portal_export_last_day_rows"] == 11


def test_a_redo_between_two_scrapes_is_seen(store):
    """retry-unsolvable may set a day aside and rebuild it between two scrapes: its record is new."""
    from portal_export import redo

    complete(store, day(2), health(3, 1, rows=9))
    m = Metrics(store, SETTINGS, clock=lambda: NOW)
    assert values(m.collect())["portal_export_last_day_rows"] == 9
    write_json(store, store_keys.redone(day(2), redo.new_stamp()), {"was_complete": True, "kept": {}, "set_aside": {}})
    complete(store, day(2), health(4, 0, rows=11))
    assert values(m.collect())["portal_export_last_day_rows"] == 11

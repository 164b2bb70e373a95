"""One alert per failed run across hosts (portal_export/alert_claim.py), on a real LocalStore."""

import datetime
import os
import threading
import time

from portal_export.alert_claim import SLACK_S, claim, fingerprint
from portal_export.alert_text import MissingDay, RunFacts
from portal_export.state import store_now
from portal_export.store import LocalStore, read_json

DAY = datetime.date(2026, 5, 1)


def facts(code="ERROR_KEY_DOES_NOT_EXIST", **kw):
    base = dict(
        command="backfill",
        days=[DAY],
        missing=[MissingDay(DAY, failed_regions={"north": code, "south": code})],
        regions=["north", "south"],
        rerun="make backfill START=2026-05-01 STOP=2026-05-02",
        exit_code=30,
        where="host host-a, data dir /data",
    )
    return RunFacts(**{**base, **kw})


def test_the_fingerprint_is_what_failed_not_which_host_saw_it():
    same = fingerprint(facts(), "failure")
    assert fingerprint(facts(exit_code=25, where="host host-b, data dir /mnt/data"), "failure") == same
    assert fingerprint(facts(code="ERROR_KEY_DOES_NOT_EXIST (earlier run)"), "failure") == same  # a later start
    assert fingerprint(facts(code="ERROR_PAGEURL"), "failure") != same
    assert fingerprint(facts(command="export"), "failure") != same
    assert fingerprint(facts(days=[DAY, DAY + datetime.timedelta(days=1)]), "failure") != same


def yesterday(store, prefix):
    """Move every object under `prefix` a day back on the store's clock (a local store's: mtimes)."""
    for key in store.list(prefix):
        t = store.path(key).stat().st_mtime - 86_400
        os.utime(store.path(key), (t, t))


MTIME_TICK_S = 0.01


def test_hosts_of_one_run_claim_once_and_a_later_run_claims_again(tmp_path):
    store = LocalStore(tmp_path)
    started = store_now(store)
    first = claim(store, "f1", started=started, host="host-a", run="host-a-1-0badc0de")
    # a local file's mtime is stamped from the kernel's coarse clock, up to a tick off time.time()
    assert first.ours and first.host == "host-a" and started - MTIME_TICK_S <= first.at <= store_now(store)
    assert read_json(store, "_state/alerts/f1/00000000.json")["run"] == "host-a-1-0badc0de"
    # host-b and host-c ran the same command meanwhile: the claim covers them
    for host, began in (("host-b", started + 0.5), ("host-c", started - 1)):
        other = claim(store, "f1", started=began, host=host)
        assert not other.ours and other.host == "host-a" and other.at == first.at
    # a start within the store's resolution after the claim is still of the same run
    assert not claim(store, "f1", started=first.at + SLACK_S - 0.5, host="host-d").ours
    # tomorrow's run, started after that alert: the same failure is alerted again, once
    yesterday(store, "_state/alerts/f1/")
    tomorrow = claim(store, "f1", started=store_now(store), host="host-b")
    assert tomorrow.ours
    assert not claim(store, "f1", started=store_now(store) - 1, host="host-a").ours
    assert store.list("_state/alerts/f1/") == ["_state/alerts/f1/00000000.json", "_state/alerts/f1/00000001.json"]
    assert claim(store, "f2", started=store_now(store), host="host-a").ours  # another failure


def test_a_host_whose_clock_is_minutes_off_claims_as_the_others_do(tmp_path, monkeypatch):
    """Which claim covers a run is the store's business: a claimant whose clock runs 10 minutes
    behind, and one whose clock runs 10 minutes ahead, neither alert twice nor miss a new run."""
    store = LocalStore(tmp_path)
    started = store_now(store)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 600)  # host-a, behind
    first = claim(store, "f1", started=started, host="host-a")
    monkeypatch.setattr(time, "time", lambda: real() + 600)  # host-b, ahead, of the same run
    assert first.ours and not claim(store, "f1", started=started, host="host-b").ours
    yesterday(store, "_state/alerts/f1/")
    assert claim(store, "f1", started=store_now(store), host="host-b").ours  # tomorrow's run: alerted again


def test_hosts_claiming_at_the_same_moment_make_one_winner(tmp_path):
    store = LocalStore(tmp_path)
    results, barrier, started = [], threading.Barrier(8), store_now(store)

    def host(n):
        barrier.wait()
        results.append(claim(store, "f1", started=started, host=f"host-{n}"))

    threads = [threading.Thread(target=host, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.ours]
    assert len(results) == 8 and len(winners) == 1
    assert {r.host for r in results} == {winners[0].host}

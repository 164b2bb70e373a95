"""One alert per failed run across hosts (portal_export/alert_once.py), on a real LocalStore."""

import datetime
import threading

from portal_export.alert_once import CLOCK_SKEW_S, claim, fingerprint
from portal_export.alerts import MissingDay, RunFacts
from portal_export.store import LocalStore

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


def test_hosts_of_one_run_claim_once_and_a_later_run_claims_again(tmp_path):
    store = LocalStore(tmp_path)
    first = claim(store, "f1", started=100.0, host="host-a", now=160.0)
    assert first.ours and first.host == "host-a"
    # host-b and host-c ran the same command meanwhile: the claim covers them
    for host, started in (("host-b", 101.0), ("host-c", 99.0)):
        other = claim(store, "f1", started=started, host=host, now=170.0)
        assert not other.ours and other.host == "host-a" and other.at == 160.0
    # a host whose clock is a little ahead is still of the same run
    assert not claim(store, "f1", started=160.0 + CLOCK_SKEW_S - 1, host="host-d", now=200.0).ours
    # tomorrow's run, started after that alert: the same failure is alerted again, once
    tomorrow = claim(store, "f1", started=86_400.0, host="host-b", now=86_460.0)
    assert tomorrow.ours
    assert not claim(store, "f1", started=86_401.0, host="host-a", now=86_470.0).ours
    assert store.list("_state/alerts/f1/") == ["_state/alerts/f1/00000000.json", "_state/alerts/f1/00000001.json"]
    assert claim(store, "f2", started=86_401.0, host="host-a", now=86_470.0).ours  # another failure


def test_hosts_claiming_at_the_same_moment_make_one_winner(tmp_path):
    store = LocalStore(tmp_path)
    results, barrier = [], threading.Barrier(8)

    def host(n):
        barrier.wait()
        results.append(claim(store, "f1", started=100.0, host=f"host-{n}", now=150.0))

    threads = [threading.Thread(target=host, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.ours]
    assert len(results) == 8 and len(winners) == 1
    assert {r.host for r in results} == {winners[0].host}

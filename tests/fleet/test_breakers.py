"""Breakers across hosts: a key or a login refused on one host stops every host of the fleet.

Three worker hosts (sandbox/hosts.py: PID namespaces, folders of their own) on one luigid (cap 4)
and one bucket. The breaker is an object in the bucket, read before every CaptchaAI request and
every login post: no more than the cap's requests in flight when the refusal came can be refused
in all, however many hosts there are. The sandbox bans the IP after 5 bad-key requests (every host
here has the same one), as CaptchaAI does: a breaker that did not hold across hosts would earn it.
"""

import threading
import time

import pytest

from sandbox import SANDBOX_USER
from tests.helpers.cfg import FAST_CLIENT, cfg_text
from tests.helpers.fleet import CAP, START, STOP, Bucket, shared_env, told
from tests.helpers.speed import scaled

BAN_AFTER = CAP + 1
HOSTS = ("host-a", "host-b", "host-c")
WRONG_PASSWORD = "Wr0ng-Passw0rd-fleet-canary-42"


@pytest.fixture
def fleet(sandbox, fleet_luigid, hosts, s3_data_dir, seaweedfs, webhook):
    """fleet(sandbox config, **env): three hosts on one luigid and bucket, 2 workers each (6 > the
    cap), alerting through one webhook; returns (sandbox, hosts, webhook, bucket)."""

    def make(sb_config, **env):
        sb = sandbox(ban_after=BAN_AFTER, **sb_config)
        hook = webhook()
        shared = {**shared_env(sb, fleet_luigid, s3_data_dir), "ALERT_WEBHOOK_URL": hook.url, **env}
        cfg = cfg_text({**FAST_CLIENT, "core": {"workers": 2}})
        return sb, [hosts(name, shared, cfg) for name in HOSTS], hook, Bucket(seaweedfs, s3_data_dir)

    return make


def assert_every_host_stopped_with_one_alert(runs, hook, code, exit_codes):
    assert {r.code for r in runs} <= exit_codes, told(runs)
    assert all(code in r.err for r in runs), told(runs)
    assert len(hook.raw) == 1, hook.texts()  # one alert for the three hosts' one run
    (text,) = hook.texts()
    assert f"A breaker is open ({code})" in text, text
    senders = [r for r in runs if "alert sent by webhook" in r.err]
    assert len(senders) == 1, runs
    for run in runs:
        if run is not senders[0]:
            assert f"alert: sent by host {senders[0].name} at " in run.err, run


@pytest.mark.unmeasured
def test_a_key_revoked_mid_backfill_stops_all_three_hosts_after_at_most_the_cap_of_bad_key_answers(fleet):
    sb, fleet_hosts, hook, bucket = fleet({"solve_s": 50})  # 0.5 s solves: some are in flight at the revocation

    def revoke_once_solves_run():
        while sb.stats()["tokens"]["accepted"] < 6:
            time.sleep(0.005)
        sb.configure(valid_keys=frozenset())  # the account's key is revoked while every host solves

    revoker = threading.Thread(target=revoke_once_solves_run, daemon=True)
    revoker.start()
    for host in fleet_hosts:
        host.start("backfill", START, STOP)
    runs = [host.wait(timeout=scaled(120)) for host in fleet_hosts]
    revoker.join(timeout=5)

    stats = sb.stats()
    assert 1 <= stats["bad_key_requests"] <= CAP, stats  # over all three hosts
    assert stats["ip_bans"] == 0, stats
    # each run failed: Luigi's [retcode] task_failed
    assert_every_host_stopped_with_one_alert(runs, hook, "ERROR_KEY_DOES_NOT_EXIST", {30})
    (breaker,) = bucket.keys("_state/breaker-")  # one breaker, in the bucket, for every host
    assert '"ERROR_KEY_DOES_NOT_EXIST"' in bucket.read(breaker)
    # every host refused its later regions on the breaker: none solved anything after it
    submitted = sum(stats["submits"].values())
    assert submitted <= stats["tokens"]["accepted"] + CAP, stats


@pytest.mark.unmeasured
def test_a_refused_password_stops_all_three_hosts_after_at_most_the_cap_of_refused_logins(fleet):
    sb, fleet_hosts, hook, bucket = fleet(
        {"variants": {"*": {"login"}}}, PORTAL_USERNAME=SANDBOX_USER, PORTAL_PASSWORD=WRONG_PASSWORD
    )
    for host in fleet_hosts:  # at once: each host's check before its run races the others'
        host.start("backfill", START, STOP)
    runs = [host.wait(timeout=scaled(120)) for host in fleet_hosts]

    stats = sb.stats()
    assert 1 <= stats["logins"].get("refused-credentials", 0) <= CAP, stats  # over all three hosts
    assert set(stats["logins"]) == {"refused-credentials"}, stats
    assert sb.tasks() == [] and stats["requests"].get("in.php", 0) == 0  # nothing solved for a session that cannot post
    # each host's login check before its run is refused (exit 2), or its tasks fail on the breaker (30)
    assert_every_host_stopped_with_one_alert(runs, hook, "PORTAL_LOGIN_REFUSED", {2, 30})
    (breaker,) = bucket.keys("_state/breaker-")
    assert '"PORTAL_LOGIN_REFUSED"' in bucket.read(breaker)
    for run in runs:
        assert WRONG_PASSWORD not in run.out + run.err

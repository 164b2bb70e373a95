"""ops/takeover.py: which DISABLED tasks died with their host (luigid's fields and the failure record), and what a
survivor waits for of the other runs' work on luigid."""

import datetime

from ops.takeover import died_with_worker
from portal_export.failures import write_failure
from tasks import targets
from tasks.region import RegionExport


def disabled(worker_running=None, time_running=1000.0):
    """A DISABLED task as luigid's task_list serializes it."""
    return {"status": "DISABLED", "worker_running": worker_running, "time_running": time_running}


def test_a_task_luigid_failed_for_its_dead_worker_died_with_it(data_dir):
    task = RegionExport(datetime.date(2026, 5, 1), "north")
    assert died_with_worker(disabled(), task)
    write_failure(targets.store(), task.failure_key(), "ERROR_PAGEURL")  # now: after it started running
    assert not died_with_worker(disabled(time_running=0.5), task)  # it failed for real, then its host died
    assert died_with_worker(disabled(time_running=9e12), task)  # that record is from an earlier attempt


def test_a_failure_a_worker_reported_or_a_task_that_never_ran_is_not_taken_over(data_dir):
    task = RegionExport(datetime.date(2026, 5, 1), "north")
    assert not died_with_worker(disabled(worker_running="Worker(salt=1, host=host-b, pid=1)"), task)
    assert not died_with_worker(disabled(time_running=None), task)


def test_a_real_failure_on_a_host_whose_clock_is_behind_is_not_taken_over(data_dir, monkeypatch):
    """Whether it was "written since it started" is the record's time on the store's clock against luigid's, not
    the writer's stamp: a host 10 minutes behind still wrote it after luigid saw the task start."""
    import time

    task = RegionExport(datetime.date(2026, 5, 1), "north")
    started = time.time() - 1  # luigid's time_running: a second ago
    real = time.time
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: real() - 600)
        write_failure(targets.store(), task.failure_key(), "ERROR_PAGEURL")  # stamped 10 minutes "ago"
    assert not died_with_worker(disabled(time_running=started), task)


HOST_B = "Worker(host=host-b)"
HOST_C = "Worker(host=host-c)"


def re_enabled_task(central, day):
    """A RegionExport of `day` on `central` as host B's takeover leaves it: failed by luigid for its dead host
    (DISABLED, retry_count = 1), then re-enabled (FAILED) before host B's Luigi adds it again."""
    from ops import luigid

    task_id = RegionExport(day, "north").task_id
    sched = luigid.remote(central.url)
    sched.add_task(worker=HOST_B, task_id=task_id, status="PENDING", retry_policy_dict={"retry_count": 1})
    sched.add_task(worker=HOST_B, task_id=task_id, status="FAILED")
    assert set(central.task_list("DISABLED")) == {task_id}
    sched.re_enable_task(task_id)
    assert set(central.task_list("FAILED")) == {task_id}
    return sched, task_id


def test_a_task_another_host_re_enabled_to_take_over_is_waited_for_until_it_is_done(data_dir, tmp_path):
    """Host B re-enables a task whose host died (luigid: FAILED) and runs Luigi again, which adds it a moment
    later. Host C, waiting for the other runs' work on these days, waits for it meanwhile too: seen as no work,
    C would end before B's takeover, the day missing (a fleet's survivor exiting 30 on a day that got done)."""
    import threading

    from ops.takeover import wait_for_other_runs
    from tests.helpers.runs import Luigid, wait_for

    day = datetime.date(2026, 5, 5)
    central = Luigid(tmp_path / "luigid")
    try:
        sched, task_id = re_enabled_task(central, day)
        waited = []
        host_c = threading.Thread(target=lambda: waited.append(wait_for_other_runs(central.url, [day], {"host-c"})))
        host_c.start()
        host_c.join(timeout=1.5)
        assert host_c.is_alive()  # waiting for host B
        sched.add_task(worker=HOST_B, task_id=task_id, status="DONE")
        wait_for(lambda: not host_c.is_alive(), "host C's wait to end")
        assert waited == [True]
    finally:
        central.stop()


def test_a_survivor_runs_luigi_again_for_a_task_another_host_re_enabled_and_left_to_nobody(data_dir, tmp_path):
    """Host B re-enabled a dead host's task and, for whatever reason (it stalled, it died), no run of it is on luigid:
    a survivor with nothing DISABLED to take over runs Luigi again, which adds the task and runs it, rather than
    end with the day missing."""
    from ops.takeover import Takeover, portal_tasks
    from tests.helpers.runs import Luigid

    day = datetime.date(2026, 5, 5)
    central = Luigid(tmp_path / "luigid")
    try:
        sched, task_id = re_enabled_task(central, day)
        reruns = []

        def rerun():  # Luigi again here: it adds the task and runs it
            reruns.append(task_id)
            sched.add_task(worker="Worker(host=host-c)", task_id=task_id, status="DONE")
            return 0

        takeover = Takeover(central.url, portal_tasks([day]), print, delay_s=0.0)
        code = takeover.run(25, rerun=rerun, settle=lambda failed: None, done=lambda: bool(reruns))
        assert reruns == [task_id] and code == 0
    finally:
        central.stop()


def test_a_survivor_runs_luigi_again_for_a_re_enabled_task_luigid_made_pending_before_any_run_added_it(
    data_dir, tmp_path, luigi_cfg
):
    """Host C re-enabled a dead host's task (FAILED), and its Luigi, slow to start on a loaded host, has not added
    it yet when retry_delay has passed: luigid's prune makes it PENDING, with no worker but host B's, whose run has
    ended. Host B, seeing nothing DISABLED and nothing FAILED, ended with exit 30 and the day missing (while host C
    finished it, or not at all if C stopped). It runs Luigi again: the task is left for no run of its own."""
    from ops.takeover import MAX_TAKEOVERS, Takeover, portal_tasks
    from tests.helpers.runs import Luigid, wait_for

    day = datetime.date(2026, 5, 5)
    luigi_cfg("scheduler", "retry_delay", 1)  # as the fleet tests have it
    central = Luigid(tmp_path / "luigid")
    try:
        sched, task_id = re_enabled_task(central, day)
        pending = wait_for(lambda: central.task_list("PENDING").get(task_id), "luigid's prune making it PENDING")
        assert pending["workers"] == [HOST_B]
        reruns = []

        def rerun():  # Luigi again here: as luigid has it, with no run that takes it
            reruns.append(task_id)
            return 25

        takeover = Takeover(central.url, portal_tasks([day]), print, delay_s=0.0, own={HOST_B})
        code = takeover.run(25, rerun=rerun, settle=lambda failed: None, done=lambda: False)
        assert reruns == [task_id] * MAX_TAKEOVERS and code == 25  # then it is left as it is, not run forever
        # another run's task waiting for its worker is that run's: no rerun here for it
        reruns.clear()
        assert Takeover(central.url, portal_tasks([day]), print, delay_s=0.0, own={HOST_C}).left() is False
    finally:
        central.stop()


def test_a_region_set_aside_waits_out_luigids_cooldown_from_when_luigid_saw_it_done(data_dir, tmp_path, monkeypatch):
    """retry-unsolvable right after a failed night, on a loaded host: the region's output was written, and luigid
    marked it DONE seconds later. luigid ignores a worker's PENDING for it until stable_done_cooldown_secs have passed
    since that DONE, and would hand out the day's DayExport meanwhile, which fails on the missing region. Waited
    from the output's time (the old rule: cooldown + 0.5 s), the PENDING below came too soon."""
    import time

    from ops import luigid, takeover
    from tests.helpers.runs import Luigid
    from tests.helpers.speed import scaled

    cooldown = 3
    monkeypatch.setattr(takeover, "LUIGID_DONE_COOLDOWN_S", cooldown)
    day = datetime.date(2026, 5, 5)
    central = Luigid(tmp_path / "luigid", extra={"scheduler": {"stable_done_cooldown_secs": cooldown}})
    try:
        task_id = RegionExport(day, "north").task_id
        sched = luigid.remote(central.url)
        sched.add_task(worker="Worker(host=a)", task_id=task_id, status="PENDING")
        time.sleep(1.0)  # the region's output written, its DONE not yet at luigid
        sched.add_task(worker="Worker(host=a)", task_id=task_id, status="DONE")
        sched.add_task(worker="Worker(host=b)", task_id=task_id, status="PENDING")
        assert set(central.task_list("DONE")) == {task_id}  # ignored: luigid's cooldown

        began = time.monotonic()
        takeover.settle_done_cooldown(central.url, [day])
        sched.add_task(worker="Worker(host=b)", task_id=task_id, status="PENDING")

        assert set(central.task_list("PENDING")) == {task_id}
        assert time.monotonic() - began <= cooldown + scaled(1.5)  # luigid's Date is whole seconds: at most one more
    finally:
        central.stop()


def test_a_task_moving_from_pending_to_running_while_luigid_is_read_is_still_waited_for(
    data_dir, tmp_path, monkeypatch
):
    """Host C's takeover moves a task FAILED -> PENDING -> RUNNING within a second. Host B, waiting for the other runs'
    work, read luigid one status at a time, so a task that moved on between two readings was in neither: B saw no work,
    ended "failed in another run" with exit 30, and C finished the day (seen under one core). Here every reading of
    luigid moves it on, as it can between any two; B still waits for it until it is done."""
    import threading

    from ops import luigid
    from ops.takeover import wait_for_other_runs
    from tests.helpers.runs import Luigid, wait_for

    day = datetime.date(2026, 5, 5)
    central = Luigid(tmp_path / "luigid")
    try:
        task_id = RegionExport(day, "north").task_id
        sched = luigid.remote(central.url)
        sched.add_task(worker=HOST_C, task_id=task_id, status="PENDING")
        real = luigid.remote

        class Moving:
            """luigid, where host C's worker takes the task right after each reading."""

            def __init__(self, url):
                self.sched = real(url)

            def task_list(self, *args, **kwargs):
                found = self.sched.task_list(*args, **kwargs)
                if central.task_list("PENDING"):
                    sched.get_work(worker=HOST_C)  # PENDING -> RUNNING
                return found

        monkeypatch.setattr(luigid, "remote", Moving)
        waited = []
        host_b = threading.Thread(target=lambda: waited.append(wait_for_other_runs(central.url, [day], {"host-b"})))
        host_b.start()
        host_b.join(timeout=1.5)
        assert host_b.is_alive() and set(central.task_list("RUNNING")) == {task_id}  # waiting for host C's task
        sched.add_task(worker=HOST_C, task_id=task_id, status="DONE")
        wait_for(lambda: not host_b.is_alive(), "host B's wait to end")
        assert waited == [True]
    finally:
        central.stop()

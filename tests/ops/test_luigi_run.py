"""The exit code of a Luigi run: real `luigi.build` runs of small tasks, mapped through luigi.cfg's [retcode]
(already_running 10, missing_data 20, not_run 25, task_failed 30, scheduling_error 35,
unhandled_exception 40)."""

import luigi
import luigi.execution_summary
import luigi.retcodes
import pytest

from ops import luigi_run

Status = luigi.execution_summary.LuigiStatusCode


class Writes(luigi.Task):
    path = luigi.Parameter()

    def output(self):
        return luigi.LocalTarget(self.path)

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")


class Fails(Writes):
    def run(self):
        raise RuntimeError("the portal said no")


class BrokenRequires(Writes):
    def requires(self):
        raise RuntimeError("cannot even say what it needs")


class Missing(luigi.ExternalTask):
    path = luigi.Parameter()

    def output(self):
        return luigi.LocalTarget(self.path)


class NeedsMissing(Writes):
    def requires(self):
        return Missing(self.path + ".upstream")


class WritesNothing(Writes):
    """Luigi calls it DONE (check_complete_on_run off), yet its output is missing."""

    def run(self):
        pass


class NeedsSlot(Writes):
    resources = {"slot": 1}


@pytest.fixture
def run(tmp_path, luigi_cfg):
    luigi_cfg("worker", "check_complete_on_run", "false")  # WritesNothing is DONE to Luigi

    def run_(*tasks, factory=None, lock_dir=tmp_path / "locks"):
        return luigi_run.run(
            tasks, factory or luigi_run.WorkerSchedulerFactory(), lock_dir=str(lock_dir), scheduler_url=None
        )

    return run_


def test_success_is_0(run, tmp_path):
    assert run(Writes(str(tmp_path / "a"))) == 0
    assert (tmp_path / "a").read_text() == "ok"


def test_a_failed_task_is_task_failed(run, tmp_path):
    assert run(Fails(str(tmp_path / "a"))) == 30


def test_a_broken_requires_is_a_scheduling_error(run, tmp_path):
    assert run(BrokenRequires(str(tmp_path / "a"))) == 35


def test_failed_and_scheduling_error_exit_with_the_larger_code(run, tmp_path):
    assert run(Fails(str(tmp_path / "a")), BrokenRequires(str(tmp_path / "b"))) == 35


def test_a_missing_external_dependency_is_missing_data(run, tmp_path):
    assert run(NeedsMissing(str(tmp_path / "a"))) == 20


def test_a_task_refused_a_slot_is_not_run(run, tmp_path):
    factory = luigi_run.WorkerSchedulerFactory(on_local=lambda sched: sched.update_resource("slot", 0))
    assert run(NeedsSlot(str(tmp_path / "a")), factory=factory) == 25
    assert not (tmp_path / "a").exists()


def test_a_task_luigi_calls_done_without_its_output_is_not_run(run, tmp_path):
    """The status says success; the asked-for task is not complete."""
    assert run(WritesNothing(str(tmp_path / "a"))) == 25


def test_the_same_command_again_with_the_same_lock_dir_is_already_running(run, tmp_path):
    """Luigi's own pid lock, keyed on this process's command line: this process still holds it."""
    assert run(Writes(str(tmp_path / "a"))) == 0
    assert run(Writes(str(tmp_path / "b"))) == 10
    assert not (tmp_path / "b").exists()
    assert run(Writes(str(tmp_path / "b")), lock_dir=tmp_path / "other-locks") == 0


def test_an_error_inside_luigi_is_unhandled_exception(run, tmp_path, caplog):
    def broken(scheduler):
        raise RuntimeError("scheduler went away")

    factory = luigi_run.WorkerSchedulerFactory(on_local=broken)
    assert run(Writes(str(tmp_path / "a")), factory=factory) == 40
    assert "scheduler went away" in caplog.text


def test_the_factory_sets_keep_alive_only_when_told():
    sched = luigi.scheduler.Scheduler()
    assert luigi_run.WorkerSchedulerFactory(keep_alive=True).create_worker(sched, 1)._config.keep_alive is True
    assert luigi_run.WorkerSchedulerFactory().create_worker(sched, 1)._config.keep_alive is False  # luigi.cfg's


@pytest.mark.parametrize(
    "status, code",
    [
        (Status.SUCCESS, 0),
        (Status.SUCCESS_WITH_RETRY, 0),
        (Status.FAILED, 30),
        (Status.FAILED_AND_SCHEDULING_FAILED, 35),
        (Status.SCHEDULING_FAILED, 35),
        (Status.NOT_RUN, 25),
        (Status.MISSING_EXT, 20),
    ],
)
def test_every_status_of_this_luigi_has_its_code(status, code):
    assert luigi_run.status_code(status, luigi.retcodes.retcode()) == code


def test_a_status_a_later_luigi_adds_is_judged_by_its_smiley():
    class Later:
        def __init__(self, name, value):
            self.name, self.value = name, value

    codes = luigi.retcodes.retcode()
    assert luigi_run.status_code(Later("SUCCESS_SOMEHOW", (":)", "")), codes) == 0
    assert luigi_run.status_code(Later("FAILED_SOMEHOW", (":(", "")), codes) == 30


def test_the_codes_follow_the_retcode_section(luigi_cfg):
    luigi_cfg("retcode", "task_failed", "7")
    luigi_cfg("retcode", "scheduling_error", "3")
    codes = luigi.retcodes.retcode()
    assert luigi_run.status_code(Status.FAILED_AND_SCHEDULING_FAILED, codes) == 7
    assert luigi_run.exit_code(Status.SUCCESS, roots_complete=False, codes=codes) == 25
    assert luigi_run.exit_code(Status.FAILED, roots_complete=False, codes=codes) == 7

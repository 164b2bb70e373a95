"""ops/stopping.py in-process: what a stop leaves in the log."""

import logging
import os
import signal
import time

import pytest

from ops import stopping
from tasks.base import stops_quietly


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append((record.getMessage(), (record.exc_text or "").rsplit("\n", 1)[-1]))


def test_a_stop_that_luigis_scheduler_swallows_is_not_logged_as_an_error():
    """Luigi's local scheduler logs every exception where it records task history (`except
    BaseException`); a Stopped landing there is sent again, not an error with a traceback."""
    scheduler, kept = logging.getLogger("luigi.scheduler"), Kept()
    scheduler.addHandler(kept)
    try:
        with stopping.handled():
            for error in (stopping.Stopped(signal.SIGINT), ValueError("history db gone")):
                try:
                    raise error
                except BaseException:
                    scheduler.warning("Error saving Task history", exc_info=True)
        scheduler.warning("after", exc_info=(stopping.Stopped, stopping.Stopped(signal.SIGTERM), None))
    finally:
        scheduler.removeHandler(kept)
    assert kept.seen == [
        ("Error saving Task history", "ValueError: history db gone"),
        ("after", "ops.stopping.Stopped: SIGTERM"),  # outside a run, nothing is left out
    ]
    assert signal.getsignal(signal.SIGINT) is not stopping._handle


def forked(body):
    """A child of this process running `body()` (then exit 3), once it said it is ready: its pid."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            body(lambda: os.write(write, b"r"))
        finally:
            os._exit(3)
    os.close(write)
    assert os.read(read, 1) == b"r"
    os.close(read)
    return pid


def exit_code(pid):
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_forked_process_of_a_run_ends_at_once_and_quietly_outside_its_tasks_run(capfd, signum):
    """Where Luigi or multiprocessing has it (before or after the task's run), a stop raised would
    be printed, or unwind into the worker's code the child was forked from."""

    def idle(ready):
        ready()
        time.sleep(30)

    with stopping.handled():
        pid = forked(idle)
        os.kill(pid, signum)
        assert exit_code(pid) == 130
    assert capfd.readouterr().err == ""


def test_within_its_tasks_run_a_forked_process_unwinds_the_task_first(tmp_path):
    def solving(ready):
        with stops_quietly():
            try:
                ready()
                time.sleep(30)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # the worker's own stop, while the task unwinds
                (tmp_path / "unwound").write_text("its marks released")

    with stopping.handled():
        pid = forked(solving)
        os.kill(pid, signal.SIGTERM)
        assert exit_code(pid) == 130
    assert (tmp_path / "unwound").read_text() == "its marks released"

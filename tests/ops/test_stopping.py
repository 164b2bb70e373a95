"""ops/stopping.py in-process: what a stop leaves in the log."""

import logging
import signal

from ops import stopping


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

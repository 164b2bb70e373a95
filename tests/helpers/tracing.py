"""Set-up that runs the pipeline's own code thousands of times in the test's process, untraced.

Under `make cover` coverage's tracer runs in every test process, and a loop of the pipeline's code
(seeding a year of state) takes eight times as long under it. The lines such set-up runs are the
ones the tests of those functions measure; what the test then checks stays measured.
"""

import contextlib
from collections.abc import Iterator

import coverage


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    cov = coverage.Coverage.current()  # pytest-cov's, in this process; None without --cov
    if cov is None:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()

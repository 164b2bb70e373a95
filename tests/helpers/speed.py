"""How much slower this machine runs the suite than the one its margins were measured on.

A test waits for an event wherever it can; where a margin or a deadline cannot be avoided (a
process's answer within some seconds, pytest-timeout's per-test limit) it multiplies it by FACTOR.
FACTOR is measured once per test run, in the process that starts it, by timing a fixed CPU-bound
loop against REFERENCE_S, the loop's time on the 2-core development machine when idle, and by the
cores the run may use: a slower CPU, an older Python, cores shared with other work (a second suite
beside this one), fewer cores (`taskset -c 0`) each make it larger. The measurement goes into the
environment, so that pytest-xdist's workers and every subprocess share it; setting SPEED_ENV by hand
(say to 4) replaces it.
"""

import os
import subprocess
import sys

SPEED_ENV = "PORTAL_TEST_SPEED"
STEPS = 5_000_000
REFERENCE_S = 0.22  # STEPS on the development machine, idle, Python 3.11 (3.10 takes 0.33 s)
REFERENCE_CORES = 2  # the development machine's (and CI's)
MAX_FACTOR = 10.0  # beyond this a stuck test would hang for hours; set SPEED_ENV by hand


# the fastest of three: a moment's contention at the start (pytest-xdist starting its workers) is no slower machine
LOOP = f"""
import time
def once():
    begin = time.perf_counter()
    total = 0
    for i in range({STEPS}):
        total += i
    return time.perf_counter() - begin
print(min(once() for _ in range(3)))
"""


def loop_seconds():
    """Wall time of a fixed pure-Python loop: the CPU's speed and this run's share of it. Timed in a
    Python of its own started without `site` (-S), so that no coverage tracer (make cover's --cov,
    which makes such a loop twice as slow) is running in it: the tests' subprocesses run traced too, but
    their margins are for waiting on sockets and sleeps far more than for Python steps."""
    return float(subprocess.run([sys.executable, "-S", "-c", LOOP], capture_output=True, text=True, check=True).stdout)


def measure():
    """FACTOR for this run: the environment's if a parent process measured it, else measured now."""
    given = os.environ.get(SPEED_ENV)
    if given:
        return float(given)
    # fewer cores (`taskset -c 0`): the loop runs alone at the start, but the suite's workers will share them
    cores = len(os.sched_getaffinity(0))
    factor = round(min(MAX_FACTOR, max(1.0, loop_seconds() / REFERENCE_S * max(1.0, REFERENCE_CORES / cores))), 2)
    os.environ[SPEED_ENV] = str(factor)
    return factor


FACTOR = measure()


def scaled(seconds):
    """A margin or deadline of `seconds` on the development machine, on this one."""
    return seconds * FACTOR

"""How much slower this machine runs the suite than the one its margins were measured on.

A test waits for an event wherever it can; where a margin or a deadline cannot be avoided (a
process's answer within some seconds, pytest-timeout's per-test limit) it multiplies it by FACTOR.
FACTOR is measured once per test run, in the process that starts it, by timing a fixed CPU-bound
loop against REFERENCE_S, the loop's time on the 2-core development machine when idle: a slower
CPU, an older Python, a core shared with other work (`taskset -c 0`, a second suite beside this one)
each make it larger. The measurement goes into the environment, so that pytest-xdist's workers and
every subprocess share it; setting SPEED_ENV by hand (say to 4) replaces it.
"""

import os
import time

SPEED_ENV = "PORTAL_TEST_SPEED"
STEPS = 5_000_000
REFERENCE_S = 0.22  # STEPS on the development machine, idle, Python 3.11 (3.10 takes 0.33 s)
MAX_FACTOR = 10.0  # beyond this a stuck test would hang for hours; set SPEED_ENV by hand


def loop_seconds(steps=STEPS):
    """Wall time of a fixed pure-Python loop: the CPU's speed and this process's share of it."""
    begin = time.perf_counter()
    total = 0
    for i in range(steps):
        total += i
    return time.perf_counter() - begin


def measure():
    """FACTOR for this run: the environment's if a parent process measured it, else measured now."""
    given = os.environ.get(SPEED_ENV)
    if given:
        return float(given)
    # the fastest of three: a moment's contention at the start (pytest-xdist starting its workers) is no slower
    # machine, and an inflated factor lengthens every scaled deadline the suite waits out
    factor = round(min(MAX_FACTOR, max(1.0, min(loop_seconds() for _ in range(3)) / REFERENCE_S)), 2)
    os.environ[SPEED_ENV] = str(factor)
    return factor


FACTOR = measure()


def scaled(seconds):
    """A margin or deadline of `seconds` on the development machine, on this one."""
    return seconds * FACTOR

"""Luigi forks task processes from the run's process, where the progress and plan threads run
(portal_export/forksafe.py says why that can hang a child, and how it is prevented)."""

import contextlib
import fcntl
import io
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from portal_export import forksafe
from tests import ROOT
from tests.helpers.cfg import write_cfg
from tests.helpers.speed import scaled

F_SETPIPE_SZ = 1031  # Linux: a pipe of one page fills between the test's reads
FIONREAD = 0x541B  # Linux: the bytes waiting in a pipe


def pipe_bytes(fd):
    return int.from_bytes(fcntl.ioctl(fd, FIONREAD, bytes(4)), sys.byteorder)


def child_writes(stream, read_fd):
    """Fork; the child drains the pipe, writes one line through `stream` and exits. True when it
    finished within 3 s, False when it hung (it is killed then)."""
    pid = os.fork()
    if pid == 0:
        fcntl.fcntl(read_fd, fcntl.F_SETFL, os.O_NONBLOCK)
        with contextlib.suppress(BlockingIOError):
            while os.read(read_fd, 1 << 16):
                pass
        stream.write("child\n")
        os._exit(0)
    deadline = time.monotonic() + scaled(3)
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False


@pytest.mark.parametrize("guarded", [True, False])
def test_a_fork_waits_for_a_threads_write_in_progress(guarded):
    """A thread blocked inside a buffered write holds the stream's lock. Unguarded, a child forked
    then hangs on its first write through that stream (Python does not re-initialise that lock);
    guarded, the fork waits until the write is done and the child writes."""
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, F_SETPIPE_SZ, 4096)
    stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(write_fd, "w")), line_buffering=True)
    inside = threading.Event()

    def writer():
        with forksafe.guard if guarded else contextlib.nullcontext():
            inside.set()
            stream.write("x" * 100_000 + "\n")  # blocks on the full pipe until the reader below drains it

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    inside.wait()
    deadline = time.monotonic() + scaled(10)
    while pipe_bytes(read_fd) < 4096:  # the pipe is full: the writer is blocked in write(2), holding the stream's lock
        assert time.monotonic() < deadline, "the writer never filled the pipe"
        time.sleep(0.005)

    def drain_later():
        time.sleep(0.5)
        fcntl.fcntl(read_fd, fcntl.F_SETFL, os.O_NONBLOCK)
        while thread.is_alive():
            with contextlib.suppress(BlockingIOError):
                os.read(read_fd, 1 << 16)
            time.sleep(0.01)

    drainer = threading.Thread(target=drain_later, daemon=True)
    drainer.start()
    began = time.monotonic()
    with pytest.warns(DeprecationWarning) if sys.version_info >= (3, 12) else contextlib.nullcontext():
        finished = child_writes(stream, read_fd)
    assert finished is guarded
    if guarded:
        assert time.monotonic() - began >= 0.4  # the fork waited for the write to end
    drainer.join(timeout=10)


@pytest.mark.long
@pytest.mark.unmeasured
def test_500_forks_while_the_progress_and_plan_threads_log_and_read_the_plan(sandbox, tmp_path):
    """The run's process as `make backfill` has it (tests/helpers/fork_load.py): a real Luigi worker with 4
    processes forks 500 task processes while the progress watcher prints a line per day and the
    governor reads threadsinfo over HTTP every 20 ms and logs each change of the cap (another
    consumer takes 2 threads every 0.1 s). stderr is a one-page pipe read slowly, so writes block
    often. A hung task process would be killed by Luigi's [worker] timeout and its day missing."""
    from sandbox import SANDBOX_KEY

    sb = sandbox()
    cfg = write_cfg(
        tmp_path / "load.cfg", {"captchaai": {"plan_every_s": 0.02, "http_timeout_s": 2}, "worker": {"timeout": 20}}
    )
    env = {
        **os.environ,
        "CAPTCHAAI_API_KEY": SANDBOX_KEY,
        "CAPTCHAAI_API_BASE": sb.captchaai_url,
        "PORTAL_BASE_URL": sb.portal_url,
        "LUIGI_CONFIG_PATH": str(cfg),
    }
    stop = threading.Event()

    def other_consumer():
        while not stop.is_set():
            sb.occupy_threads(2, 5.0)  # 50 ms at the sandbox's time scale
            stop.wait(0.1)

    threading.Thread(target=other_consumer, daemon=True).start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fork_load", "500"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    fcntl.fcntl(proc.stderr.fileno(), F_SETPIPE_SZ, 4096)
    err = bytearray()

    def read_slowly():
        while chunk := os.read(proc.stderr.fileno(), 4096):
            err.extend(chunk)
            time.sleep(0.01)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    try:
        out = proc.stdout.read()
        assert proc.wait(timeout=scaled(120)) == 0
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
    text = err.decode(errors="replace")
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["code"] == 0 and result["missing"] == [], text[-3000:]
    assert result["forks"] >= 500
    assert text.count(" done: ") == 500  # the progress thread printed every day
    assert text.count("ops.steward: cap ") >= 10, text[-3000:]  # the plan thread changed the cap and logged it
    assert "Timeout" not in text and "hung" not in text

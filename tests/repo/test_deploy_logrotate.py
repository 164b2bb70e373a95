"""deploy/logrotate: `logrotate -d` accepts it, and forced rotations while luigid of
portal-export-luigid.service writes its log lose no line and repeat none."""

import gzip
import re
import subprocess
import threading

import pytest
import requests

from sandbox.luigid import wait_for
from sandbox.ports import free_port
from tests.helpers.cfg import FAST_CLIENT, write_cfg
from tests.helpers.deploy_files import (
    DEPLOY,
    Service,
    account,
    clone,
    installed,
    server_dir,
    write_env_file,
)
from tests.helpers.programs import program
from tests.helpers.speed import scaled

__all__ = ["account", "server_dir"]  # fixtures
pytestmark = pytest.mark.live


def logrotate_conf(tmp_path, checkout, account):
    conf = tmp_path / "logrotate-portal-export"
    conf.write_text(installed((DEPLOY / "logrotate").read_text(), checkout, tmp_path / "env", account))
    return conf


def test_logrotate_accepts_the_file_and_covers_every_log_deploy_writes(tmp_path, account):
    text = (DEPLOY / "logrotate").read_text()
    logs = set(re.findall(r"^(\S+) \{", text, re.M))
    assert logs == {"/srv/portal-export/var/log/nightly.log", "/srv/portal-export/var/log/luigid.log"}
    assert "var/log/nightly.log" in (DEPLOY / "crontab").read_text()
    assert "copytruncate" not in text
    checkout = tmp_path / "portal-export"
    (checkout / "var" / "log").mkdir(parents=True)
    for name in ("nightly.log", "luigid.log"):
        (checkout / "var" / "log" / name).write_text("a line\n")
    account.own(checkout)
    done = subprocess.run(
        [
            program("logrotate", "logrotate"),
            "-d",
            "-s",
            str(tmp_path / "state"),
            str(logrotate_conf(tmp_path, checkout, account)),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "error" not in done.stderr.lower(), done.stderr
    assert "considering log" in done.stderr and "luigid.log" in done.stderr and "nightly.log" in done.stderr


def rotated_lines(log_dir):
    """Every line of luigid.log and its rotations (plain or gzipped)."""
    lines = []
    for path in sorted(log_dir.glob("luigid.log*")):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        lines += data.decode().splitlines()
    return lines


def test_forced_rotations_lose_no_line_that_a_running_luigid_writes(tmp_path, server_dir, account):
    logrotate = program("logrotate", "logrotate")
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    url = f"http://127.0.0.1:{free_port()}"
    fast = write_cfg(server_dir / "etc" / "fast.cfg", FAST_CLIENT)
    env_file = write_env_file(
        server_dir / "etc" / "env", {"LUIGI_CONFIG_PATH": str(fast), "LUIGI_SCHEDULER_URL": url}, account
    )
    luigid = Service("portal-export-luigid.service", checkout, env_file, account, server_dir / "luigid.out")
    sent, stop = [], threading.Event()

    def write_lines():  # each request luigid refuses is one line of its log
        session = requests.Session()
        while not stop.is_set():
            session.get(f"{url}/line-{len(sent)}", timeout=5)
            sent.append(len(sent))

    writer = threading.Thread(target=write_lines)
    try:
        assert wait_for(lambda: answers(url), scaled(30)), luigid.log.read_text()
        writer.start()
        conf = logrotate_conf(tmp_path, checkout, account)

        def lines_written(n):  # n more lines: each rotation comes mid-write, at any speed
            target = len(sent) + n
            assert wait_for(lambda: len(sent) >= target or not writer.is_alive(), scaled(30)), len(sent)

        for _ in range(3):
            lines_written(35)
            done = subprocess.run(
                [logrotate, "-f", "-s", str(tmp_path / "state"), str(conf)], capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
        lines_written(35)
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        log_dir = checkout / "var" / "log"
        wait_for(lambda: f"GET /line-{len(sent) - 1} " in "\n".join(rotated_lines(log_dir)), scaled(5))
        luigid.stop()
    logged = [int(m[1]) for line in rotated_lines(log_dir) for m in [re.search(r"GET /line-(\d+) ", line)] if m]
    assert len(sent) > 100 and sorted(logged) == list(range(len(sent))), (len(sent), len(logged))
    names = sorted(p.name for p in log_dir.glob("luigid.log*"))
    assert names == ["luigid.log", "luigid.log.1", "luigid.log.2.gz", "luigid.log.3.gz"], names
    for name in names:  # every file got lines of its own
        assert "GET /line-" in "\n".join(rotated_lines_of(log_dir / name)), name


def rotated_lines_of(path):
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode().splitlines()


def answers(url):
    try:
        return requests.get(f"{url}/api/task_list", timeout=2).status_code == 200
    except requests.RequestException:
        return False

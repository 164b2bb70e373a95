"""`make scheduler` / `make scheduler-stop`: luigid on loopback, its state and task history in var/.

Only luigid's own config sets the captchaai cap for runs that use it, so its config is written
from the effective client config ([resources], [scheduler]) at every start: one place to size
the cap. luigid runs with var/ as its working directory so it reads nothing else.
"""

import configparser
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import luigi.configuration

VAR = Path(os.environ.get("PORTAL_VAR_DIR", "var")).resolve()
PIDFILE = VAR / "luigid.pid"


def luigid_config(path):
    client = luigi.configuration.get_config()
    cfg = configparser.ConfigParser(interpolation=None)
    for section in ("resources", "scheduler"):
        cfg[section] = dict(client.items(section)) if client.has_section(section) else {}
    cfg["scheduler"]["record_task_history"] = "true"
    # luigid sends no e-mail ("DISABLED ... due to excessive failures", batch digests), whatever
    # /etc/luigi says: a run that leaves work missing sends its one alert itself.
    cfg["email"] = {"format": "none"}
    cfg["scheduler"]["state_path"] = str(VAR / "luigid" / "state.pickle")
    cfg["task_history"] = {"db_connection": f"sqlite:///{VAR / 'luigid' / 'history.db'}"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write("# Written by `make scheduler` from luigi.cfg (and LUIGI_CONFIG_PATH); edit those instead.\n")
        cfg.write(f)
    return path


def running_pid():
    try:
        pid = int(PIDFILE.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        if b"luigid" not in cmdline.read_bytes():
            return None  # a stale pid file whose pid now belongs to another program: never signal it
    except OSError:
        pass  # no /proc here: trust the file
    return pid


def start(url, answers, say):
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        say(f"error: luigid has no authentication; it binds loopback only, not {parts.hostname}")
        return 2
    pid = running_pid()
    if pid or answers(url):
        say(f"error: a central scheduler is already running at {url}" + (f" (pid {pid})" if pid else ""))
        return 1
    PIDFILE.unlink(missing_ok=True)  # stale (else running_pid saw it): luigid would exit quietly on a live pid
    cfg = luigid_config(VAR / "luigid.cfg")
    # luigid daemonizes with umask 0: its pickle (loaded at its next start), history and logs
    # would be world-writable. Directories only the operator can enter keep them private.
    for private in (VAR / "luigid", VAR / "log"):
        private.mkdir(parents=True, exist_ok=True)
        private.chmod(0o700)
    luigid = Path(sys.executable).with_name("luigid")
    subprocess.run(
        [
            str(luigid),
            "--background",
            "--pidfile",
            str(PIDFILE),
            "--logdir",
            str(VAR / "log"),
            "--state-path",
            str(VAR / "luigid" / "state.pickle"),
            "--address",
            "127.0.0.1",
            "--port",
            str(parts.port or 8082),
        ],
        cwd=VAR,
        env={**os.environ, "LUIGI_CONFIG_PATH": str(cfg)},
        check=True,
    )
    for _ in range(100):
        if answers(url):
            if PIDFILE.exists():
                PIDFILE.chmod(0o644)  # written under umask 0 too: nobody else may redirect `scheduler-stop`
            say(
                f"scheduler: luigid running at {url} (pid {running_pid()}); visualiser {url}; "
                f"state and task history in {VAR / 'luigid'}; stop it with `make scheduler-stop`"
            )
            return 0
        time.sleep(0.1)
    say(f"error: luigid did not answer at {url} within 10 s; see {VAR / 'log'}")
    return 1


def stop(say):
    pid = running_pid()
    if not pid:
        say("scheduler: not running")
        return 0
    os.kill(pid, signal.SIGTERM)  # luigid saves its state on the way out
    for _ in range(100):
        if running_pid() is None:
            say(f"scheduler: stopped (pid {pid})")
            return 0
        time.sleep(0.1)
    say(f"error: luigid (pid {pid}) still runs 10 s after SIGTERM")
    return 1

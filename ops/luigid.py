"""`make scheduler` / `make scheduler-stop`: luigid on loopback (or a named address), its state and task history
in var/; `--foreground` for a service manager (deploy/portal-export-luigid.service). Its config sets the captchaai
cap for its runs, so it is written from the client config at every start: one place to size the cap. luigid runs
in its home, so it reads no other config. LUIGI_SCHEDULER_URL is checked, shown without its password, and probed:
on a network luigid sits behind an authenticating proxy whose credentials the URL carries
(`https://USER:PASSWORD@HOST:PORT`), sent as HTTP basic auth by Luigi's RPC client and the probe here."""

import configparser
import contextlib
import email.utils
import errno
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import luigi.configuration
import requests

from tasks import config, targets
from tasks.secrets import MASK

from . import stopping

VAR = Path(os.environ.get("PORTAL_VAR_DIR", "var")).resolve()
PIDFILE = VAR / "luigid.pid"
LOOPBACK = "127.0.0.1"
LUIGID = Path(sys.executable).with_name("luigid")
# `scheduler` waits for luigid to answer this long, or GONE_AFTER_S when its process has ended (or
# never wrote its pid file): a loaded machine can take more than 10 s to start it
START_WITHIN_S, GONE_AFTER_S = 60, 10
# [s3] keys luigid's config does not get: credentials stay in the environment luigid inherits
S3_CREDENTIALS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
Say = Callable[[str], None]
REFUSED = (401, 403)  # the proxy's answers to missing or wrong credentials


def problem(url: str) -> str | None:
    """What is wrong with a scheduler URL, in a few words; None when it can be used."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as err:
        return f"not a URL ({err})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give http(s)://[USER:PASSWORD@]HOST:PORT"
    for what, value in (("user", parts.username), ("password", parts.password)):
        if value and not unquote(value).isascii():
            # refused far from here otherwise: no htpasswd entry made from UTF-8 matches it
            return f"the {what} must be ASCII (Luigi's HTTP client sends basic-auth credentials as Latin-1)"
    return None


def shown(url: str) -> str:
    """The URL as printed: its password masked, the user kept (which login a run uses)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    user, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    name, colon, _ = user.partition(":")
    return parts._replace(netloc=f"{name}{':' + MASK if colon else ''}@{host}").geturl()


def bare(url: str) -> str:
    """The URL without its credentials: the visualiser's address (a browser asks for the login)."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def answers(url: str) -> bool:
    """Whether anything answers HTTP at `url` (a scheduler, if it is one); a TLS failure is no answer."""
    with contextlib.suppress(requests.exceptions.SSLError):
        return status(url) is not None
    return False


def status(url: str) -> int | None:
    """The HTTP status answered at `url`, None when nothing answers; SSLError when TLS verification fails."""
    try:
        return requests.get(url, timeout=2, allow_redirects=False).status_code
    except requests.exceptions.SSLError:
        raise
    except requests.RequestException:
        return None


def done_ago(url: str, task_ids: Collection[str]) -> float:
    """Seconds since luigid marked the newest of `task_ids` DONE, on luigid's own clock: its answer's Date, whole
    seconds, so never more than they are (inf when none is DONE there). RequestException when it does not answer."""
    query = {"data": json.dumps({"status": "DONE", "upstream_status": "", "search": None})}
    resp = requests.get(f"{url}/api/task_list", params=query, timeout=10)
    resp.raise_for_status()
    updated = [float(task["last_updated"]) for task_id, task in resp.json()["response"].items() if task_id in task_ids]
    if not updated:
        return float("inf")
    return email.utils.parsedate_to_datetime(resp.headers["Date"]).timestamp() - max(updated)


def remote(url: str) -> Any:
    """luigid's RPCs (Any: RemoteScheduler makes them at import), whose retries end at a stop."""
    return stopping.RemoteScheduler(url)


def luigid_config(
    path: Path,
    home: Path = VAR / "luigid",
    resources: Mapping[str, int] | None = None,
    history: bool = True,
    extra: Mapping[str, Mapping[str, object]] | None = None,
) -> Path:
    """luigid's config at `path`, from the client's; its state (and task history) under `home`."""
    client = luigi.configuration.get_config()
    cfg = configparser.ConfigParser(interpolation=None)
    for section in ("resources", "scheduler"):
        cfg[section] = dict(client.items(section)) if client.has_section(section) else {}
    cfg["resources"].update({name: str(amount) for name, amount in (resources or {}).items()})
    cfg["scheduler"].setdefault("metrics_collector", "custom")
    # luigid's /metrics: Luigi's task metrics and the data dir's portal_export_* (docs/monitoring.md), from [portal]
    cfg["scheduler"].setdefault("metrics_custom_import", "ops.metrics_server.LuigidMetrics")
    portal = config.portal()
    cfg["portal"] = {
        "data_dir": data_dir(),
        "max_unsolvable_ratio": str(portal.max_unsolvable_ratio),
        "metrics_window_days": str(portal.metrics_window_days),
    }
    cfg["captchaai"] = {"plan_every_s": str(config.captchaai().plan_every_s)}
    if client.has_section("s3"):
        cfg["s3"] = {k: v for k, v in client.items("s3") if k not in S3_CREDENTIALS}
    cfg["scheduler"].update(record_task_history=str(history).lower(), state_path=str(home / "state.pickle"))
    if history:
        cfg["task_history"] = {"db_connection": f"sqlite:///{home / 'history.db'}"}
    cfg["email"] = {"format": "none"}  # whatever /etc/luigi says: a run that leaves work missing alerts itself
    for section, keys in (extra or {}).items():  # what an operator's /etc/luigi might add
        if not cfg.has_section(section):
            cfg.add_section(section)
        for key, value in keys.items():
            cfg[section].setdefault(key, str(value))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write("# Written by `make scheduler` from luigi.cfg (and LUIGI_CONFIG_PATH); edit those instead.\n")
        cfg.write(f)
    return path


def data_dir() -> str:
    """The data dir, absolute: luigid runs in its own working directory."""
    where = config.data_dir_text()
    return where if targets.is_remote(where) else str(Path(where).resolve())


def environment(cfg: Path) -> dict[str, str]:
    """luigid's environment: ours (credentials for an object store among it), its config, the data dir absolute."""
    return {**os.environ, "LUIGI_CONFIG_PATH": str(cfg), "PORTAL_DATA_DIR": data_dir()}


def running_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    with contextlib.suppress(OSError):  # no /proc here: trust the file
        if b"luigid" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None  # a stale pid file whose pid now belongs to another program: never signal it
    return pid


def listen_addresses(bind: str, port: int) -> list[str]:
    """Every address of `bind` (luigid listens on each, as tornado does), checked free; else OSError."""
    infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tornado does
            probe.bind(sockaddr)
    return sorted({str(info[4][0]) for info in infos})


def _can_start(url: str, say: Say, bind: str, pid: int | None = None) -> tuple[str, int, list[str]] | int:
    """(URL to reach it at, port, addresses) for a luigid on `bind`, its private dirs made; else an exit code."""
    port = urlsplit(url).port or 8082
    host = {"0.0.0.0": LOOPBACK, "::": "::1", "": LOOPBACK}.get(bind, bind)  # a wildcard is reached on loopback
    local = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    running = f"error: a central scheduler is already running at {local}"
    if pid:
        say(f"{running} (pid {pid})")
        return 1
    try:
        addresses = listen_addresses(bind, port)
    except OSError as err:
        # only a port taken is worth asking: an address not this host's would be asking another host
        if err.errno == errno.EADDRINUSE and answers(local):
            say(running)
            return 1
        say(f"error: luigid cannot listen on {bind} port {port}: {err.strerror or err}")
        return 2
    # luigid daemonizes with umask 0: private directories keep its pickle, history and logs private
    for private in (VAR / "luigid", VAR / "log"):
        private.mkdir(parents=True, exist_ok=True)
        private.chmod(0o700)
    return local, port, addresses


def start(url: str, say: Say, bind: str = LOOPBACK) -> int:
    """luigid in the background on `bind`; beyond loopback it warns."""
    ready = _can_start(url, say, bind, running_pid())
    if isinstance(ready, int):
        return ready
    local, port, addresses = ready
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        say(
            f"warning: luigid listens on {', '.join(addresses)} port {port} with no authentication: whoever "
            "reaches it can change the captchaai cap, mark tasks done and read every task's parameters; "
            'put it behind the authenticating proxy of docs/operations.md "luigid on a network, behind a proxy"'
        )
    PIDFILE.unlink(missing_ok=True)  # stale (else running_pid saw it): luigid would exit quietly on a live pid
    cfg = luigid_config(VAR / "luigid.cfg")
    daemon = ["--background", "--pidfile", str(PIDFILE), "--logdir", str(VAR / "log")]
    subprocess.run([str(LUIGID), *daemon, *_where(bind, port)], cwd=VAR, env=environment(cfg), check=True)
    begin = time.monotonic()
    while not answers(local):
        waited = time.monotonic() - begin
        # a luigid gone is no use waiting for; one still starting on a loaded machine is
        if waited > START_WITHIN_S or (waited > GONE_AFTER_S and running_pid() is None):
            say(f"error: luigid did not answer at {local} within {waited:.0f} s; see {VAR / 'log'}")
            return 1
        time.sleep(0.1)
    if PIDFILE.exists():
        PIDFILE.chmod(0o644)  # written under umask 0 too: nobody else may redirect `scheduler-stop`
    say(
        f"scheduler: luigid running at {local} (pid {running_pid()}); visualiser {local}; "
        f"state and task history in {VAR / 'luigid'}; stop it with `make scheduler-stop`"
    )
    return 0


def foreground(url: str, say: Say, bind: str = LOOPBACK) -> int:
    """luigid exec'd in place of this process (for a service manager), as `start`'s; returns if it cannot."""
    ready = _can_start(url, say, bind)
    if isinstance(ready, int):
        return ready
    local, port, _ = ready
    log_file, logging_conf = VAR / "log" / "luigid.log", VAR / "luigid-logging.conf"
    logging_conf.write_text(Path(__file__).with_name("luigid-logging.conf").read_text().format(path=str(log_file)))
    cfg = luigid_config(VAR / "luigid.cfg", extra={"core": {"logging_conf_file": str(logging_conf)}})
    PIDFILE.write_text(str(os.getpid()))  # luigid's once exec'd: `make scheduler-stop` stops it too
    say(f"scheduler: luigid at {local} in the foreground (pid {os.getpid()}); log {log_file}")
    os.chdir(VAR)
    os.execve(LUIGID, [str(LUIGID), *_where(bind, port)], environment(cfg))


def _where(bind: str, port: int) -> list[str]:
    return ["--state-path", str(VAR / "luigid" / "state.pickle"), "--address", bind, "--port", str(port)]


def stop(say: Say) -> int:
    if not (pid := running_pid()):
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

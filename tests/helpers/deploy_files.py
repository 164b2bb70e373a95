"""deploy/'s files as an operator installs them, read the way their programs read them: the crontab's
command line, the units' ExecStart with their WorkingDirectory, EnvironmentFile and User, and the
logrotate file. Only what an operator edits is replaced: the checkout's path, the env file's path
and, without root, the service account."""

import grp
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT  # noqa: E402
from tests.helpers.programs import is_root, program

DEPLOY = ROOT / "deploy"
VENV = Path(sys.prefix)  # the venv the suite runs in: .venv, or make test-pythons' .venv-X.Y
CHECKOUT = "/srv/portal-export"  # where docs/deploy.md clones the repository
ENV_FILE = "/etc/portal-export/env"
ACCOUNT = "portal-export"
HOME = "/var/lib/portal-export"  # the account's, as docs/deploy.md creates it
# What systemd gives a system service before its EnvironmentFile= (systemd.exec(5) "Environment").
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file's sections: {section: {key: [values, in order]}} (a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in (DEPLOY / name).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def service_value(name: str, key: str) -> str:
    """The last value of `key` in a unit's [Service] (the one systemd uses)."""
    return unit(name)["Service"][key][-1]


class Account:
    """Who the deployment runs as: as root, the units' User= (created as docs/deploy.md creates it,
    when missing) where it can run this checkout's .venv, else the current user."""

    def __init__(self) -> None:
        entry = pwd.getpwuid(os.getuid())
        if is_root():
            if not known(ACCOUNT):
                subprocess.run(
                    [program("useradd", "passwd"), "--system", "--user-group", "--home-dir", HOME]
                    + ["--create-home", "--shell", "/usr/sbin/nologin", ACCOUNT],
                    capture_output=True,  # another test process may have created it meanwhile
                )
            if runs_the_venv(pwd.getpwnam(ACCOUNT)):
                entry = pwd.getpwnam(ACCOUNT)
        self.name, self.uid, self.gid = entry.pw_name, entry.pw_uid, entry.pw_gid

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run as this account (setpriv, as systemd's User= and Group= do)."""
        if self.uid == os.getuid():
            return argv
        return [
            program("setpriv", "util-linux"),
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--init-groups",
            "--",
            *argv,
        ]

    def own(self, path: Path) -> None:
        """`path` and everything under it made this account's (as its clone and var/ are)."""
        if self.uid == os.getuid():
            return
        os.lchown(path, self.uid, self.gid)
        for dirpath, dirs, files in os.walk(path):
            for each in dirs + files:
                os.lchown(os.path.join(dirpath, each), self.uid, self.gid)


def runs_the_venv(entry: pwd.struct_passwd) -> bool:
    """Whether the account can start the suite's venv's python: not where the venv was made from a
    Python in root's home (pyenv's), which no other account may enter."""
    probe = [program("setpriv", "util-linux"), f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    python = str(VENV / "bin" / "python")
    return subprocess.run([*probe, "--", "/bin/sh", "-c", '"$0" -c pass', python], capture_output=True).returncode == 0


def known(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture
def account() -> Account:
    return Account()


@pytest.fixture
def server_dir(account):
    """A directory standing for the server's disk, which `account` can reach (pytest's tmp_path is
    root's alone): the checkout and /etc/portal-export go in it."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="deploy-test-"))
    where.chmod(0o755)
    account.own(where)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def clone(where: Path, account: Account) -> Path:
    """A fresh checkout of this working tree at `where` (its tracked and new files: no var/, no
    data/), with the suite's venv as its `make venv` (.venv), owned by `account`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (where / ".venv").symlink_to(VENV)
    account.own(where)
    return where


def installed(text: str, checkout: Path, env_file: Path, account: Account) -> str:
    """A deploy/ file's text with the paths (and, without root, the account) of this installation."""
    text = text.replace(CHECKOUT, str(checkout)).replace(ENV_FILE, str(env_file))
    if account.name != ACCOUNT:  # logrotate's `su USER GROUP` and `create MODE USER GROUP`
        text = text.replace(f"{ACCOUNT} {ACCOUNT}", f"{account.name} {grp.getgrgid(account.gid).gr_name}")
    return text


def write_env_file(path: Path, values: dict[str, str], account: Account) -> Path:
    """An env file as docs/deploy.md installs it: mode 0600, the account's."""
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    account.own(path)
    return path


def load_env_file(env_file: Path) -> dict[str, str]:
    """What deploy/with-env (the crontab's loader; systemd's EnvironmentFile= reads the same bare
    values alike) makes of `env_file`."""
    out = subprocess.run(
        ["/bin/sh", str(DEPLOY / "with-env"), str(env_file), "env", "-0"],
        env={"PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    ).stdout.decode()
    loaded = dict(item.split("=", 1) for item in out.split("\0") if item)
    return {k: v for k, v in loaded.items() if k not in ("PATH", "PWD", "SHLVL", "_")}


def service_environment(env_file: Path, account: Account) -> dict[str, str]:
    """A system service's environment: systemd's own, then its EnvironmentFile=."""
    entry = pwd.getpwuid(account.uid)
    base = {
        "PATH": SYSTEMD_PATH,
        "LANG": "C.UTF-8",
        "HOME": entry.pw_dir,
        "LOGNAME": entry.pw_name,
        "USER": entry.pw_name,
        "SHELL": entry.pw_shell,
    }
    return {**base, **load_env_file(env_file)}


def exec_start(
    name: str, checkout: Path, env_file: Path, account: Account, key: str = "ExecStart"
) -> tuple[list[str], dict[str, str], Path]:
    """A unit's ExecStart (or the last of another Exec key) as systemd runs it: (argv as the unit's user,
    environment, working dir). ${NAME} takes the environment's value as one word, as systemd substitutes it."""
    return exec_lines(name, checkout, env_file, account, key)[-1]


def exec_lines(
    name: str, checkout: Path, env_file: Path, account: Account, key: str
) -> list[tuple[list[str], dict[str, str], Path]]:
    """Every line of a unit's Exec key (ExecStartPre may repeat), each as exec_start gives it."""
    env = service_environment(env_file, account)
    workdir = Path(installed(service_value(name, "WorkingDirectory"), checkout, env_file, account))
    out = []
    for line in unit(name)["Service"].get(key, []):
        words = shlex.split(installed(line, checkout, env_file, account))
        argv = [re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word) for word in words]
        out.append((account.command(argv), env, workdir))
    return out


def exec_start_pre(name: str, checkout: Path, env_file: Path, account: Account) -> subprocess.CompletedProcess | None:
    """A unit's ExecStartPre lines run in order, as systemd runs them before ExecStart: the first that
    fails (systemd then starts nothing), or None when all succeed."""
    for argv, env, workdir in exec_lines(name, checkout, env_file, account, "ExecStartPre"):
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            return done
    return None


class Service:
    """A unit's ExecStart started as systemd starts it (see exec_start), its output in `log`; stop()
    sends SIGTERM, as `systemctl stop` does, and returns (exit code, seconds to exit)."""

    def __init__(self, name: str, checkout: Path, env_file: Path, account: Account, log: Path) -> None:
        import subprocess as sp

        refused = exec_start_pre(name, checkout, env_file, account)
        assert refused is None, refused  # a test of the refusal runs exec_start_pre itself
        argv, self.env, workdir = exec_start(name, checkout, env_file, account)
        self.log = log
        with open(log, "w") as out:
            self.proc = sp.Popen(argv, cwd=workdir, env=self.env, stdout=out, stderr=sp.STDOUT, start_new_session=True)

    def stop(self, timeout: float = 10.0) -> tuple[int | None, float]:
        import signal
        import time

        begin = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        return code, time.monotonic() - begin

"""The nginx site of docs/operations.md, run for real: taken from that page (so the page is what is tested),
its addresses, file paths and upstream pointed at this test's own, in front of a real luigid.
Without a login nginx refuses; with it, Luigi's RPC client and a whole `export` go through, as
plain HTTP and with the site's TLS lines. Needs Debian's `nginx` (`.ci/run` installs it); skips,
saying so, where it is not installed."""

import datetime
import os
import re
import socket
import subprocess
import time

import pytest
import requests

from ops.luigid import remote
from sandbox.ports import PortTaken, free_port, on_free_ports, port_taken
from tests import ROOT
from tests.helpers.programs import program
from tests.helpers.runs import Luigid
from tests.helpers.speed import scaled

DAY = datetime.date(2026, 9, 3)
USER, PASSWORD = "worker1", "3f9c1e0d7b2a46c58e1f0a9b7c6d5e4f"  # as `openssl rand -hex 16` makes one
# what the docs' site names, and this test puts its own in place of
LISTEN, UPSTREAM = "10.0.0.5:8443", "http://127.0.0.1:8082"
HTPASSWD, CERT, KEY = "/etc/nginx/luigid.htpasswd", "/etc/nginx/tls/scheduler.crt", "/etc/nginx/tls/scheduler.key"


def readme_site():
    """The ```nginx block of docs/operations.md's section on the proxy."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### luigid on a network, behind a proxy", 1)[1]
    (site,) = re.findall(r"```nginx\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    return site


def with_tls(site):
    """The site as docs/operations.md says to serve TLS: its commented TLS lines instead of the plain listen."""
    lines = site.splitlines()
    plain = [line for line in lines if re.fullmatch(rf"\s*listen {LISTEN};", line)]
    tls = [line for line in lines if re.fullmatch(r"\s*# (listen \S+ ssl|ssl_\w+ +\S+);", line)]
    assert len(plain) == 1 and len(tls) == 3, site
    return "\n".join(line.replace("# ", "", 1) if line in tls else line for line in lines if line not in plain)


def htpasswd_line(user, password):
    """As docs/operations.md's `openssl passwd -6` makes it."""
    made = subprocess.run(
        [program("openssl", "openssl"), "passwd", "-6", "-stdin"],
        input=password,
        capture_output=True,
        text=True,
        check=True,
    )
    return f"{user}:{made.stdout.strip()}\n"


@pytest.fixture
def nginx(tmp_path):
    """start(site, upstream) runs nginx with that site, proxying to `upstream`, in a main config of
    the test's own (its pid, logs and temporary files under tmp_path); returns the listening port."""
    procs = []

    def start(site, upstream):
        return on_free_ports(lambda: launch(site, upstream, free_port()))

    def launch(site, upstream, port):
        for placeholder in (LISTEN, UPSTREAM, HTPASSWD):
            assert placeholder in site, f"the site of docs/operations.md no longer names {placeholder}"
        site = site.replace(LISTEN, f"127.0.0.1:{port}").replace(UPSTREAM, upstream)
        site = site.replace(HTPASSWD, str(tmp_path / "luigid.htpasswd"))
        site = site.replace(CERT, str(tmp_path / "tls.crt")).replace(KEY, str(tmp_path / "tls.key"))
        (tmp_path / "luigid.htpasswd").write_text(htpasswd_line(USER, PASSWORD))
        temp = tmp_path / "nginx-temp"
        temp.mkdir(exist_ok=True)
        main = (
            ("user root;\n" if os.geteuid() == 0 else "")  # its workers read the test's private files
            + f"daemon off;\npid {tmp_path / 'nginx.pid'};\nerror_log {tmp_path / 'nginx-error.log'} info;\n"
            + "events { worker_connections 64; }\n"
            + f"http {{\naccess_log {tmp_path / 'nginx-access.log'};\n"
            + "".join(
                f"{kind}_temp_path {temp / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
            )
            + site
            + "}\n"
        )
        (tmp_path / "nginx.conf").write_text(main)
        errors = tmp_path / "nginx-error.log"
        logged = len(errors.read_text(errors="replace")) if errors.exists() else 0  # this start's part
        proc = subprocess.Popen(
            [
                program("nginx", "nginx"),
                "-p",
                str(tmp_path),
                "-c",
                str(tmp_path / "nginx.conf"),
                "-e",
                str(tmp_path / "nginx-error.log"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        deadline = time.monotonic() + scaled(10)
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return port
            if proc.poll() is not None:
                out = proc.stdout.read() + errors.read_text(errors="replace")[logged:]
                if port_taken(out.encode()):
                    raise PortTaken(out)
                raise AssertionError(f"nginx did not start: {out}")
            if time.monotonic() > deadline:
                raise AssertionError("nginx did not answer within 10 s")
            time.sleep(0.05)

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=scaled(10))


@pytest.fixture
def upstream(tmp_path):
    server = Luigid(tmp_path / "luigid", history=True)  # its history is searched for the password too
    yield server
    server.stop()


def self_signed(tmp_path):
    subprocess.run(
        [
            program("openssl", "openssl"),
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "tls.key")]
        + ["-out", str(tmp_path / "tls.crt")],
        capture_output=True,
        check=True,
    )
    return tmp_path / "tls.crt"


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.unmeasured
def test_the_readmes_nginx_site_refuses_without_the_login_and_carries_runs_with_it(
    scheme, live, fast_cfg, cli, upstream, nginx, tmp_path, monkeypatch, data_dir
):
    fast_cfg({"portal": {"regions": "north"}})
    site = readme_site()
    if scheme == "https":
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(self_signed(tmp_path)))  # as the docs say for a private CA
        site = with_tls(site)
    port = nginx(site, upstream.url)
    base, login = f"{scheme}://127.0.0.1:{port}", f"{scheme}://{USER}:{PASSWORD}@127.0.0.1:{port}"

    for path in ("/", "/api/task_list", "/static/visualiser/index.html"):
        assert requests.get(base + path, timeout=5).status_code == 401, path
        assert requests.get(f"{scheme}://{USER}:wrong@127.0.0.1:{port}{path}", timeout=5).status_code == 401
    assert requests.get(login, timeout=5, allow_redirects=False).status_code == 302  # luigid's own answer
    assert "Luigi Task Visualiser" in requests.get(login + "/static/visualiser/index.html", timeout=5).text
    remote(login).update_resource("captchaai", 3)  # Luigi's RPC client, the way the governor sets the cap
    assert {r["name"]: r["num_total"] for r in upstream.rpc("resource_list")} == {"captchaai": 3}

    run = cli("export", DAY, SCHEDULER="auto", LUIGI_SCHEDULER_URL=login)

    assert run.code == 0, run.err[-3000:]
    assert f"scheduler: central at {scheme}://{USER}:***@127.0.0.1:{port} (visualiser: {base})" in run.err
    assert (data_dir / f"portal_records_{DAY}.jsonl").exists()
    assert {t["name"] for t in upstream.task_list("DONE").values()} == {"DayExport", "RegionExport"}
    access = (tmp_path / "nginx-access.log").read_text()
    assert f"{USER} [" in access and "POST /api/add_task" in access  # the run's RPCs, with the login
    upstream.stop()  # luigid writes its state file
    # not in the run's output, nginx's logs, luigid's state, history and log, the data dir
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()]

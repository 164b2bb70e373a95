import os

import luigi
import luigi.configuration
import pytest

from tests import ROOT
from tests.helpers.alert_servers import smtp_server, webhook  # noqa: F401 (fixtures for every room)
from tests.helpers.cfg import FAST_CLIENT, FAST_SANDBOX, write_cfg
from tests.helpers.runs import MEASURED, CliRun, Luigid
from tests.helpers.speed import FACTOR, REFERENCE_S, SPEED_ENV, scaled

# A test that uses one of these starts a live server or a process (the sandbox on loopback, luigid,
# the CLI, SeaweedFS, hosts in namespaces): marked `live`, left out by `make test-fast`.
LIVE_FIXTURES = {"sandbox", "live", "luigid", "cli", "central", "shared_central", "hosts", "seaweedfs", "s3_data_dir"}
# Rooms and modules whose every test does so without those fixtures (make's demos, nginx, luigid by
# hand, the sandbox's own servers, forked CLIs), and parameters that start SeaweedFS through getfixturevalue.
LIVE_MODULES = ("tests.live.", "tests.fleet.", "tests.sandbox.", "tests.repo.test_bench_invariant")
LIVE_MODULES += ("tests.repo.test_readme_nginx", "tests.ops.test_fork_safety")
LIVE_MODULES += tuple(f"tests.ops.test_{name}" for name in ("backfill", "monitoring", "plan", "proxy", "scheduler"))
LIVE_MODULES += ("tests.ops.test_state", "tests.ops.test_visualiser")
LIVE_PARAMS = {"s3"}


def pytest_report_header():
    return f"speed factor: {FACTOR} ({SPEED_ENV}; 1: a loop in {REFERENCE_S} s, as on the idle development machine)"


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's limit (setup.cfg's, or a test's mark) scaled by the speed factor: a limit
    measured on the development machine, which a slower or busier one needs more time to meet."""
    if settings.timeout and FACTOR > 1:
        import pytest_timeout

        return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=settings.timeout * FACTOR))
    return None


def pytest_collection_modifyitems(items):
    for item in items:
        params = set(map(str, getattr(getattr(item, "callspec", None), "params", {}).values()))
        if (
            LIVE_FIXTURES & set(getattr(item, "fixturenames", ()))
            or item.module.__name__.startswith(LIVE_MODULES)
            or LIVE_PARAMS & params
        ):
            item.add_marker(pytest.mark.live)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))  # set in xdist's workers
    if workers > 1:
        items[:] = long_first(items, workers)


def long_first(items, workers):
    """`items` ordered so that pytest-xdist's worksteal (make test's) starts each of `workers`
    workers on its turn of the tests marked `long`. Worksteal hands worker i the i-th contiguous
    share of the collection, and an idle worker steals from the tail of another's queue, never the
    test it runs: in file order a share could end with a fleet test of half a minute, which its
    worker then ran alone while the others had nothing left to take."""
    long = [item for item in items if item.get_closest_marker("long")]
    rest = [item for item in items if not item.get_closest_marker("long")]
    ordered = []
    for i in range(workers):
        size = (len(items) - len(ordered)) // (workers - i)  # worksteal's share of what is still pending
        head = long[i::workers]
        take = max(0, size - len(head))
        ordered += head + rest[:take]
        del rest[:take]
    return ordered + rest


@pytest.fixture(scope="session")
def refusing_url():
    """A loopback URL at which nothing can answer: its port bound here and never listened on, so a
    connection is refused and no server (a test's luigid, anyone's) can take the port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch, refusing_url):
    """Each test writes into its own data dir and sees only the environment it sets. A run it starts
    with SCHEDULER unset (auto) finds no central scheduler and runs locally: it never joins the luigid of
    LUIGI_SCHEDULER_URL's default, port 8082, which may be a deployment's on this host."""
    for name in (
        "CAPTCHAAI_API_KEY",
        "CAPTCHAAI_API_BASE",
        "PORTAL_BASE_URL",
        "PORTAL_USERNAME",
        "PORTAL_PASSWORD",
        "LUIGI_CONFIG_PATH",
        "SCHEDULER",
        "LUIGI_SCHEDULER_URL",
        "ALERT_WEBHOOK_URL",  # a developer's real webhook never hears from the tests
        # nor a developer's real bucket: boto3's own variables
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("PORTAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", refusing_url)  # a test's own luigid sets its URL (central.env)
    luigi.task.Register.clear_instance_cache()
    yield
    luigi.task.Register.clear_instance_cache()


BY_TEST = "COVER_BY_TEST"  # set by make cover-by-test


@pytest.fixture(autouse=True)
def unmeasured(request, monkeypatch):
    """A test marked `unmeasured` starts its processes without coverage. Under `make cover-by-test`
    every test measures them, their data tagged with the test's id and mark (tests/helpers/cover_by_test.py)."""
    config = os.environ.get(MEASURED)
    marked = request.node.get_closest_marker("unmeasured") is not None
    if config and os.environ.get(BY_TEST):
        from coverage.config import CoverageConfig

        tagged = CoverageConfig.deserialize(config)
        tagged.context = f"{'unmeasured' if marked else 'measured'} {request.node.nodeid}"
        monkeypatch.setenv(MEASURED, tagged.serialize())
    elif marked:
        monkeypatch.delenv(MEASURED, raising=False)


@pytest.fixture
def luigi_cfg():
    """Set luigi.cfg keys for one test: luigi_cfg(section, key, value); restored afterwards."""
    cfg = luigi.configuration.get_config()
    saved = []

    def set_(section, key, value):
        old = cfg.get(section, key, None)
        saved.append((section, key, old))
        if not cfg.has_section(section):
            cfg.add_section(section)
        cfg.set(section, key, str(value))
        luigi.task.Register.clear_instance_cache()

    yield set_
    for section, key, old in reversed(saved):
        if old is None:
            cfg.remove_option(section, key)
        else:
            cfg.set(section, key, old)
    luigi.task.Register.clear_instance_cache()


@pytest.fixture
def data_dir():
    from pathlib import Path

    return Path(os.environ["PORTAL_DATA_DIR"])


# ----------------------------------------------------------------------------- the sandbox, live


@pytest.fixture
def sandbox():
    """sandbox(**config) starts a Sandbox (stopped after the test)."""
    from sandbox import Sandbox, SandboxConfig

    started = []

    def start(**overrides):
        sb = Sandbox(SandboxConfig(**{**FAST_SANDBOX, **overrides})).start()
        started.append(sb)
        return sb

    yield start
    for sb in started:
        sb.stop()


@pytest.fixture
def live(sandbox, monkeypatch, luigi_cfg, tmp_path):
    """A fast sandbox, and this process and its subprocesses pointed at it."""
    from sandbox import SANDBOX_KEY

    sb = sandbox()
    monkeypatch.setenv("CAPTCHAAI_API_KEY", SANDBOX_KEY)
    monkeypatch.setenv("CAPTCHAAI_API_BASE", sb.captchaai_url)
    monkeypatch.setenv("PORTAL_BASE_URL", sb.portal_url)
    monkeypatch.setenv("SCHEDULER", "local")
    for section, keys in FAST_CLIENT.items():
        for key, value in keys.items():
            luigi_cfg(section, key, value)
    monkeypatch.setenv("LUIGI_CONFIG_PATH", str(write_cfg(tmp_path / "fast.cfg", FAST_CLIENT)))
    return sb


@pytest.fixture
def luigid(tmp_path, monkeypatch):
    """The URL of a central scheduler for one test, which LUIGI_SCHEDULER_URL points at."""
    server = Luigid(tmp_path / "luigid")
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", server.url)
    yield server.url
    server.stop()


# ------------------------------------------------------------- live runs of the real CLI (tests/test_live_*.py)


@pytest.fixture
def cli(tmp_path):
    """cli(*argv, timeout=60, **env): run `python -m ops *argv` from the repository root with this
    process's environment (the `live` fixture's, say) and `env` on top; returns a CliRun. `timeout`
    is seconds on the development machine, scaled by the speed factor (tests/helpers/speed.py).

    Output goes to files, not pipes: task processes log whole tracebacks in one write each, which a
    regular file keeps whole where a pipe may interleave writes above PIPE_BUF."""
    import itertools
    import signal
    import subprocess
    import sys
    import time

    count = itertools.count()
    started = []

    def start(*argv, cwd=ROOT, own_group=False, **env):
        """The run in the background: a Popen, whose output cli.output(proc) reads. `cwd`: another
        checkout (a second clone), which finds the code through PYTHONPATH. `own_group`: in a
        process group of its own, as a terminal or a service manager starts it (a test may signal it)."""
        n = next(count)
        if cwd != ROOT:
            env.setdefault("PYTHONPATH", str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "ops", *map(str, argv)],
            cwd=cwd,
            env={**os.environ, **env},
            stdout=open(tmp_path / f"cli-{n}.out", "w"),  # noqa: SIM115 (the child process's output for as long as it runs)
            stderr=open(tmp_path / f"cli-{n}.err", "w"),  # noqa: SIM115 (the child process's output for as long as it runs)
            start_new_session=own_group,
        )
        proc.out_path, proc.err_path = tmp_path / f"cli-{n}.out", tmp_path / f"cli-{n}.err"
        started.append(proc)
        return proc

    def output(proc):
        return proc.out_path.read_text(), proc.err_path.read_text()

    def run(*argv, timeout=60, cwd=ROOT, **env):
        begin = time.monotonic()
        proc = start(*argv, cwd=cwd, **env)
        code = proc.wait(timeout=scaled(timeout))
        return CliRun(code, *output(proc), time.monotonic() - begin)

    run.start, run.output = start, output
    yield run
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Luigi ends its task processes too
            try:
                proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def fast_cfg(tmp_path, monkeypatch, luigi_cfg):
    """fast_cfg({section: {key: value}}): keys layered over the `live` fixture's fast config, for this
    process (luigi_cfg) and its subprocesses (a new LUIGI_CONFIG_PATH file)."""
    import itertools

    count = itertools.count()

    def layer(sections):
        merged = {section: dict(keys) for section, keys in FAST_CLIENT.items()}
        for section, keys in sections.items():
            merged.setdefault(section, {}).update(keys)
            for key, value in keys.items():
                luigi_cfg(section, key, value)
        path = write_cfg(tmp_path / f"fast-{next(count)}.cfg", merged)
        monkeypatch.setenv("LUIGI_CONFIG_PATH", str(path))
        return path

    return layer


@pytest.fixture
def central(tmp_path):
    """A Luigid for one test; `central.env` points a CLI run at it (SCHEDULER=central)."""
    server = Luigid(tmp_path / "central")
    yield server
    server.stop()


# ----------------------------------------------------------------------------- a real object store


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """One SeaweedFS (S3 on a free loopback port) for the whole session; tests take a bucket each."""
    from sandbox.seaweedfs import SeaweedFS

    store = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    yield store
    store.remove()


@pytest.fixture
def s3_data_dir(seaweedfs, monkeypatch, tmp_path, request):
    """A fresh bucket, and this process and its subprocesses pointed at s3://BUCKET/portal through
    boto3's own variables; PORTAL_VAR_DIR under this test's tmp_path. Returns the URL."""
    import hashlib

    bucket = seaweedfs.create_bucket("t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20])
    url = f"s3://{bucket}/portal"
    for name, value in seaweedfs.env(url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PORTAL_VAR_DIR", str(tmp_path / "var"))
    return url

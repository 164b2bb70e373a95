import pytest

from tests.helpers.fleet import FAST_DEATH, Bucket
from tests.helpers.runs import Luigid


@pytest.fixture
def hosts(tmp_path):
    """hosts(name, env, layered_cfg="", hostname=None, clock_s=0) makes a worker host
    (sandbox/hosts.py); all are stopped afterwards."""
    from sandbox.hosts import Host, unshare_works

    if not unshare_works():
        pytest.fail("worker hosts need `unshare` to make PID and UTS namespaces (as root, or in a user namespace)")
    made = []

    def make(name, env, layered_cfg="", hostname=None, clock_s=0.0):
        host = Host(name, tmp_path / "hosts", env, layered_cfg, hostname=hostname, clock_s=clock_s)
        made.append(host)
        return host

    yield make
    for host in made:
        host.stop()


@pytest.fixture
def bucket(seaweedfs, s3_data_dir):
    """The bucket the hosts share, read through the store's S3 API."""
    return Bucket(seaweedfs, s3_data_dir)


@pytest.fixture
def fleet_luigid(tmp_path, luigi_cfg):
    """A Luigid that notices a dead host fast (FAST_DEATH layered over luigi.cfg's [scheduler])."""
    for key, value in FAST_DEATH.items():
        luigi_cfg("scheduler", key, value)
    server = Luigid(tmp_path / "fleet-luigid")
    yield server
    server.stop()

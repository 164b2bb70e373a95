"""A local server whose free port is taken before it binds it starts again on new ports (a CI run
lost SeaweedFS's S3 gRPC port to another worker between `free_port()` and weed's bind)."""

import socket

import pytest
import requests

import sandbox.luigid
import sandbox.seaweedfs
from sandbox.ports import PortTaken, free_port, on_free_ports


@pytest.fixture
def taken():
    """A loopback port some other process is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def first_taken(port, monkeypatch, module, nth=1):
    """`module.free_port` answers `port` at its `nth` call, and free ports before and after."""
    calls = []

    def pick():
        calls.append(1)
        return port if len(calls) == nth else free_port()

    monkeypatch.setattr(module, "free_port", pick)
    return calls


@pytest.mark.unmeasured
def test_luigid_starts_again_on_a_new_port_when_its_port_was_taken(tmp_path, taken, monkeypatch):
    calls = first_taken(taken, monkeypatch, sandbox.luigid)
    luigid = sandbox.luigid.ForegroundLuigid(tmp_path / "luigid", history=False)
    try:
        assert len(calls) == 2
        assert luigid.url != f"http://127.0.0.1:{taken}"
        assert requests.get(f"{luigid.url}/api/task_list", timeout=5).ok
    finally:
        luigid.stop()


@pytest.mark.long
def test_seaweedfs_starts_again_on_new_ports_when_its_s3_grpc_port_was_taken(tmp_path, taken, monkeypatch):
    # the ninth port picked is the S3 gateway's gRPC port, the one the CI run lost
    calls = first_taken(taken, monkeypatch, sandbox.seaweedfs, nth=9)
    store = sandbox.seaweedfs.SeaweedFS(tmp_path / "weed")
    try:
        assert len(calls) == 18  # two whole sets of ports
        assert taken not in store.grpc.values()
        bucket = store.create_bucket("after-a-lost-port")
        store.client().put_object(Bucket=bucket, Key="k", Body=b"v")
        assert store.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    finally:
        store.stop()


def test_a_start_that_keeps_losing_its_port_gives_up_after_the_attempts():
    tries = []

    def start():
        tries.append(1)
        raise PortTaken("taken again")

    with pytest.raises(PortTaken):
        on_free_ports(start, attempts=3)
    assert len(tries) == 3


def test_any_other_failure_is_not_retried():
    tries = []

    def start():
        tries.append(1)
        raise RuntimeError("luigid did not start")

    with pytest.raises(RuntimeError, match="did not start"):
        on_free_ports(start)
    assert tries == [1]

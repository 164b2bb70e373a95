"""The Store protocol, by both of its implementations: a local directory and an S3 bucket (a real
SeaweedFS). Whole writes, the conditional create, listings by prefix, and errors that name the store."""

import threading

import botocore.exceptions
import pytest

from portal_export.store import LocalStore, StoreError, read_json, write_json
from tasks.s3store import S3Store, is_outage, parse_url


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "data")
    seaweedfs = request.getfixturevalue("seaweedfs")
    bucket = seaweedfs.create_bucket(f"store-{abs(hash(request.node.nodeid)) % 10**12}")
    return s3(seaweedfs, bucket)


def s3(seaweedfs, bucket, secret=None):
    from sandbox.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY
    from tasks import s3store

    client = s3store.ObjectClient(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret or SECRET_KEY,
        endpoint_url=seaweedfs.endpoint,
        region_name=REGION,
    )
    store = S3Store(f"s3://{bucket}/some/prefix", retry_s=5.0, client=client)
    return store


def test_write_read_list_delete(store):
    assert store.read("regions/2026-06-01/north.json") is None
    write_json(store, "regions/2026-06-01/north.json", {"rows": 3})
    write_json(store, "regions/2026-06-02/east.json", {"rows": 1})
    store.write("portal_records_2026-06-01.jsonl", b"{}\n")
    assert read_json(store, "regions/2026-06-01/north.json") == {"rows": 3}
    assert store.list("regions/") == ["regions/2026-06-01/north.json", "regions/2026-06-02/east.json"]
    assert store.list("regions/2026-06-02/") == ["regions/2026-06-02/east.json"]
    assert store.list("portal_records_") == ["portal_records_2026-06-01.jsonl"]
    assert store.list("nothing/") == []
    assert store.exists("portal_records_2026-06-01.jsonl") and not store.exists("portal_records_2026")
    store.delete("portal_records_2026-06-01.jsonl")
    store.delete("portal_records_2026-06-01.jsonl")  # absent: nothing
    assert not store.exists("portal_records_2026-06-01.jsonl")
    assert store.location("a/b.json").endswith("a/b.json")
    assert sorted(store.list("")) == ["regions/2026-06-01/north.json", "regions/2026-06-02/east.json"]  # nothing else


def test_create_is_won_once_among_racers(store):
    wins = []
    barrier = threading.Barrier(8)

    def race(n):
        barrier.wait()
        if store.create("_state/lease-1.json", f'{{"n": {n}}}'.encode()):
            wins.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert read_json(store, "_state/lease-1.json") == {"n": wins[0]}
    assert not store.create("_state/lease-1.json", b"{}")
    assert store.list("_state/") == ["_state/lease-1.json"]  # the losers' temporaries are gone


def test_local_store_leaves_no_temporary(tmp_path):
    store = LocalStore(tmp_path / "data")
    write_json(store, "a/b.json", {})
    assert store.location("a/b.json") == str(tmp_path / "data" / "a" / "b.json")
    assert not [p for p in (tmp_path / "data").rglob(".*")]


def test_s3_keys_live_under_the_prefix_at_their_relative_names(seaweedfs):
    bucket = seaweedfs.create_bucket("store-prefix-names")
    store = s3(seaweedfs, bucket)
    store.write("regions/2026-06-01/north.json", b"{}")
    assert store.location("regions/2026-06-01/north.json") == f"s3://{bucket}/some/prefix/regions/2026-06-01/north.json"
    keys = [o["Key"] for o in seaweedfs.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["some/prefix/regions/2026-06-01/north.json"]


def test_s3_errors_name_the_store_and_the_cause(seaweedfs):
    bucket = seaweedfs.create_bucket("store-errors")
    with pytest.raises(StoreError) as info:
        s3(seaweedfs, bucket, secret="not-the-secret").check()
    assert info.value.code == "STORE_CREDENTIALS_REFUSED"
    assert str(info.value).startswith(
        f"STORE_CREDENTIALS_REFUSED: store s3://{bucket}/some/prefix: credentials refused"
    )
    assert "not-the-secret" not in str(info.value)
    with pytest.raises(StoreError) as info:
        s3(seaweedfs, "no-such-bucket-here").read("x.json")
    assert info.value.code == "STORE_NO_BUCKET" and "bucket 'no-such-bucket-here' does not exist" in str(info.value)


@pytest.mark.parametrize(
    "url, bucket, prefix",
    [
        ("s3://bucket-1/portal", "bucket-1", "portal/"),
        ("s3://bucket-1/a/b/", "bucket-1", "a/b/"),
        ("s3://bucket-1", "bucket-1", ""),
        ("s3://my.bucket/x", "my.bucket", "x/"),
    ],
)
def test_parse_url(url, bucket, prefix):
    assert parse_url(url) == (bucket, prefix)


@pytest.mark.parametrize(
    "url",
    [
        "s3:///portal",
        "s3://B/portal",
        "s3://ab/x",
        "s3://bucket/a//b",
        "s3://bucket/../x",
        "s3://k:s@bucket/x",
        "gs://bucket/x",
        "s3://bucket/x?versionId=1",
        "s3://-bucket/x",
        "s3://a..b/x",
    ],
)
def test_malformed_urls_are_refused_in_one_line(url):
    with pytest.raises(StoreError) as info:
        parse_url(url)
    assert info.value.code == "STORE_BAD_URL" and "\n" not in str(info.value)
    assert str(info.value).startswith(f"STORE_BAD_URL: store {url}: ")  # the URL as given, never more


def client_error(code, status=400):
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


@pytest.mark.parametrize(
    "err, code",
    [
        (client_error("AccessDenied", 403), "STORE_CREDENTIALS_REFUSED"),
        (client_error("InvalidAccessKeyId", 403), "STORE_CREDENTIALS_REFUSED"),
        (client_error("ExpiredToken", 400), "STORE_CREDENTIALS_REFUSED"),
        (client_error("NoSuchBucket", 404), "STORE_NO_BUCKET"),
        (client_error("SlowDown", 503), "STORE_ERROR"),
        (botocore.exceptions.NoCredentialsError(), "STORE_NO_CREDENTIALS"),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"), "STORE_UNREACHABLE"),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"), "STORE_UNREACHABLE"),
    ],
)
def test_error_mapping(err, code):
    store = S3Store("s3://bucket-1/p", client=object())
    mapped = store.error(err, "writing x")
    assert mapped.code == code and str(mapped).startswith(f"{code}: store s3://bucket-1/p: ")


def test_an_outage_is_waited_for_and_anything_else_is_not():
    assert is_outage(botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"))
    assert is_outage(client_error("SlowDown", 503)) and is_outage(client_error("InternalError", 500))
    assert not is_outage(client_error("AccessDenied", 403)) and not is_outage(ValueError())
    store = S3Store("s3://bucket-1/p", retry_s=0.5, client=object())
    calls = []

    def down():
        calls.append(1)
        raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://x")

    with pytest.raises(StoreError) as info:
        store._retry(down, "writing x")
    assert info.value.code == "STORE_UNREACHABLE" and len(calls) >= 2
    calls.clear()

    def refused():
        calls.append(1)
        raise client_error("AccessDenied", 403)

    with pytest.raises(StoreError):
        store._retry(refused, "writing x")
    assert len(calls) == 1

"""The data dir in an S3-compatible object store. Every write is one whole `PutObject`, never multipart: a killed run
leaves no partial or temporary object. An outage is retried for `[portal] store_retry_s`; other errors are one line."""

import email.utils
import io
import logging
import os
import re
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import botocore.exceptions
import luigi.contrib.s3
import luigi.format
import luigi.target
import tenacity
from botocore.config import Config
from urllib3 import PoolManager

from portal_export.store import Entries, Entry, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
_stores: "weakref.WeakSet[S3Store]" = weakref.WeakSet()

BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # the subset every S3-compatible store accepts
MISSING = ("NoSuchKey", "404", "NotFound")
REFUSED: tuple[str, ...] = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "Forbidden")
REFUSED += ("InvalidToken", "ExpiredToken", "TokenRefreshRequired")
NO_CREDENTIALS = "no credentials found ([s3] or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, a role)"
BUSY = ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500", "502", "504")
# botocore's own retries stay short: the outage bound is ours (`retry_s`), and a preflight to no endpoint fails fast.
CLIENT_CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"})


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix ending in "/" or empty) of `s3://BUCKET[/PREFIX]`; StoreError when malformed."""
    parts = urlsplit(url)
    prefix = parts.path.strip("/")
    if parts.scheme != "s3" or parts.query or parts.fragment or "@" in parts.netloc:
        problem = "give s3://BUCKET/PREFIX"
    elif not BUCKET_NAME.fullmatch(parts.netloc) or ".." in parts.netloc:
        problem = f"{parts.netloc!r} is no bucket name (3-63 of a-z, 0-9, '.', '-'): give s3://BUCKET/PREFIX"
    elif "//" in prefix or any(seg in (".", "..") for seg in prefix.split("/")):
        problem = "the prefix has an empty, '.' or '..' segment"
    else:
        return parts.netloc, f"{prefix}/" if prefix else ""
    raise StoreError("STORE_BAD_URL", f"store {url}: {problem}")


def is_outage(err: BaseException) -> bool:
    """An error that waiting may cure: no connection, a timeout, a store saying it is busy."""
    if isinstance(err, botocore.exceptions.ClientError):
        return error_code(err) in BUSY
    return isinstance(err, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError))


def error_code(err: botocore.exceptions.ClientError) -> str:
    error, meta = err.response.get("Error", {}), err.response.get("ResponseMetadata", {})
    return str(error.get("Code") or meta.get("HTTPStatusCode"))


OUTAGES = tenacity.Retrying(
    retry=tenacity.retry_if_exception(is_outage), wait=tenacity.wait_exponential(multiplier=0.25, max=2.0), reraise=True
)


class ObjectClient(luigi.contrib.s3.S3Client):
    """Luigi's S3 client (`[s3]`, else boto3's chain), with botocore's retries kept short."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("config", CLIENT_CONFIG)
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # Luigi leaves it unannotated

    @property
    def api(self) -> Any:  # the botocore client behind Luigi's resource
        return self.s3.meta.client


class S3Store:
    """`s3://BUCKET/PREFIX`; keys are names below the prefix. A forked task process keeps the parent's
    client (building one costs tens of ms a task) but not its connections (no socket shared by two)."""

    def __init__(self, url: str, retry_s: float = 120.0, client: ObjectClient | None = None) -> None:
        self.bucket, self.prefix = parse_url(url)
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.retry_s, self.client = retry_s, client or ObjectClient()
        _stores.add(self)

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    def error(self, err: BaseException, what: str) -> StoreError:
        """One line naming the store and the cause (the messages botocore gives carry no secret)."""
        where, kind = f"store {self.url}", type(err).__name__
        if isinstance(err, botocore.exceptions.PartialCredentialsError):
            return StoreError("STORE_NO_CREDENTIALS", f"{where}: {err}")
        if isinstance(err, botocore.exceptions.NoCredentialsError):
            return StoreError("STORE_NO_CREDENTIALS", f"{where}: {NO_CREDENTIALS}")
        if isinstance(err, botocore.exceptions.ClientError):
            code = error_code(err)
            if code == "NoSuchBucket":
                return StoreError("STORE_NO_BUCKET", f"{where}: bucket {self.bucket!r} does not exist")
            if code in REFUSED:
                return StoreError("STORE_CREDENTIALS_REFUSED", f"{where}: credentials refused ({code}) while {what}")
            return StoreError("STORE_ERROR", f"{where}: {code} while {what}")
        if is_outage(err):
            return StoreError("STORE_UNREACHABLE", f"{where}: endpoint unreachable while {what} ({kind}: {err})")
        if isinstance(err, botocore.exceptions.BotoCoreError):
            return StoreError("STORE_ERROR", f"{where}: {kind} while {what}: {err}")
        return StoreError("STORE_ERROR", f"{where}: {kind} while {what}")

    def _retry(self, call: Callable[[], T], what: str, absent: tuple[str, ...] = ()) -> T:
        """`call()`, retried through an outage for up to `retry_s`; None on an `absent` code; else a StoreError."""
        started = time.monotonic()

        def answer() -> Any:
            try:
                return call()
            except botocore.exceptions.ClientError as err:
                if error_code(err) in absent:
                    return None
                raise

        def warn(state: tenacity.RetryCallState) -> None:  # called only after an outage, which it names once
            if state.attempt_number == 1 and state.outcome and (err := state.outcome.exception()):
                waiting = f"waiting up to {self.retry_s:.0f} s for it to answer ({type(err).__name__})"
                log.warning("%s: %s", self.error(err, what), waiting)

        try:
            result: T = OUTAGES.copy(stop=tenacity.stop_after_delay(self.retry_s), before_sleep=warn)(answer)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
            raise self.error(err, what) from None
        if time.monotonic() - started > 1.0:
            log.info("store %s answers again (%s)", self.url, what)
        return result

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    def _object(self, method: str, key: str, **kwargs: Any) -> Any:  # get_object, put_object, ... on `key`
        return getattr(self.client.api, method)(Bucket=self.bucket, Key=self.prefix + key, **kwargs)

    def read(self, key: str) -> bytes | None:
        return self._retry(lambda: bytes(self._object("get_object", key)["Body"].read()), f"reading {key}", MISSING)

    def write(self, key: str, data: bytes) -> None:
        self._retry(lambda: self._object("put_object", key, Body=data), f"writing {key}")

    def body(self, key: str, start: int = 0) -> Any:
        extra = {"Range": f"bytes={start}-"} if start else {}
        get = lambda: self._object("get_object", key, **extra)["Body"]  # noqa: E731
        if (body := self._retry(get, f"reading {key}", MISSING)) is None:
            raise FileNotFoundError(f"store {self.url}: no object {key}")
        return body

    def create(self, key: str, data: bytes) -> bool:
        put = lambda: self._object("put_object", key, Body=data, IfNoneMatch="*") is not None  # noqa: E731
        return bool(self._retry(put, f"creating {key}", ("PreconditionFailed", "412")))

    def exists(self, key: str) -> bool:  # one HeadObject: Luigi's probes two directory markers and lists a prefix too
        return bool(self._retry(lambda: self._object("head_object", key), f"checking {self.location(key)}", MISSING))

    def modified(self, key: str) -> float | None:
        head = lambda: float(self._object("head_object", key)["LastModified"].timestamp())  # noqa: E731
        return self._retry(head, f"checking {key}", MISSING)

    def delete(self, key: str) -> None:
        self._retry(lambda: self._object("delete_object", key), f"deleting {key}")

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        return [entry.key for entry in self.entries(prefix, start_after)]

    def _listing(self, prefix: str, **args: Any) -> tuple[Entries, float]:
        """The objects below `prefix`, and the store's time now: the listing's Date (whole seconds)."""

        def listing() -> tuple[Entries, float]:
            found: Entries = []
            now, pages = 0.0, self.client.api.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix, **args):
                found.extend(
                    Entry(obj["Key"][len(self.prefix) :], int(obj.get("Size", 0)), obj["LastModified"].timestamp())
                    for obj in page.get("Contents", ())
                )
                if date := page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date"):
                    now = max(now, email.utils.parsedate_to_datetime(date).timestamp())
            return found, now

        return self._retry(listing, f"listing {prefix or '/'}")

    def entries(self, prefix: str, start_after: str = "", limit: int | None = None) -> Entries:
        args: dict[str, Any] = {"StartAfter": self.prefix + start_after} if start_after else {}
        if limit is not None:  # no more pages than the limit needs
            args["PaginationConfig"] = {"MaxItems": limit, "PageSize": min(limit, 1000)}
        return sorted(self._listing(prefix, **args)[0])

    def written(self, prefix: str) -> tuple[dict[str, float], float]:
        """Each object's LastModified, and the store's time now (never before an object it lists)."""
        found, now = self._listing(prefix)
        return {e.key: e.modified for e in found}, max([now, *(e.modified for e in found)])

    def check(self) -> None:
        """Before a run: the bucket is there and takes the credentials (one listing, not retried: fails in seconds)."""
        try:
            self.client.api.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
            raise self.error(err, "checking the bucket") from None


class ObjectReader(io.RawIOBase):
    """An object as a stream; an outage while reading resumes where it broke off (a ranged GET), within retry_s."""

    def __init__(self, store: S3Store, key: str) -> None:
        self.store, self.key, self.offset = store, key, 0
        self.stream = store.body(key)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        def read() -> int:
            if self.stream is None:
                self.stream = self.store.body(self.key, self.offset)
            try:
                data = self.stream.read(len(buffer))
            except (botocore.exceptions.BotoCoreError, OSError):
                self.stream = None  # read again from here
                raise botocore.exceptions.ConnectionError(error=f"reading {self.key} broke off") from None
            buffer[: len(data)] = data
            self.offset += len(data)
            return len(data)

        return self.store._retry(read, f"reading {self.key}")

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        super().close()


class ObjectWriter(luigi.target.AtomicLocalFile):
    """Bytes spooled to a nameless file (a killed process leaves none), then put whole in one PutObject, retried."""

    def __init__(self, store: S3Store, key: str) -> None:
        self.store, self.key = store, key
        super().__init__(store.location(key))  # type: ignore[no-untyped-call]  # Luigi leaves it unannotated
        self.spooled = open(self.tmp_path, "rb")  # noqa: SIM115 (closed by close or __exit__)
        os.unlink(self.tmp_path)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # the spooled bytes go with the file, unsent
            io.BufferedWriter.close(self)
            self.spooled.close()

    def close(self) -> None:
        if self.closed:
            return
        io.BufferedWriter.close(self)

        def put() -> None:  # one PutObject streamed from the file, sent whole again on a retry
            self.spooled.seek(0)
            self.store._object("put_object", self.key, Body=self.spooled)

        with self.spooled:
            self.store._retry(put, f"writing {self.key}")


class ObjectTarget(luigi.contrib.s3.S3Target):
    def __init__(self, store: S3Store, key: str) -> None:
        super().__init__(store.location(key), format=luigi.format.Nop, client=store.client)  # type: ignore[no-untyped-call]
        self.store, self.key = store, key

    def exists(self) -> bool:  # within the store's retries, so completeness checks ride out an outage
        return self.store.exists(self.key)

    def open(self, mode: str = "r") -> Any:
        if mode.replace("b", "") == "w":
            return ObjectWriter(self.store, self.key)
        if mode.replace("b", "") == "r":
            return io.BufferedReader(ObjectReader(self.store, self.key), 1 << 20)
        raise ValueError(f"mode must be 'r' or 'w' (got {mode!r})")


def _forget_connections() -> None:
    """Fresh pool managers, as botocore makes them; the old ones untouched: a parent's thread may hold their lock."""
    for http in [s.client._s3.meta.client._endpoint.http_session for s in list(_stores) if s.client._s3]:
        http._proxy_managers = {}
        http._manager = PoolManager(**http._get_pool_manager_kwargs())
        http._manager.pool_classes_by_scheme = http._pool_classes_by_scheme


os.register_at_fork(after_in_child=_forget_connections)

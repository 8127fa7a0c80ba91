"""`s3://bucket/prefix` with boto3: the sync S3 store, and what both S3 flavours share.

Configuration comes from the standard AWS settings that botocore reads itself:
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` (or `endpoint_url` in the config file) for a
non-AWS endpoint such as MinIO, SeaweedFS or moto; `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE`, instance roles, ...; the
region from `AWS_REGION` (read here, since botocore ignores it), then
`AWS_DEFAULT_REGION` and the profile. `S3Options` can pin an `endpoint_url` or
`region` explicitly (tests do); otherwise the code path is the one real AWS takes.

Client settings (the reasons are in docs/object-store.md):
* payload signing off (`UNSIGNED-PAYLOAD`): over plain HTTP botocore would otherwise
  SHA-256 every body (~40 ms CPU per 8 MiB). Over HTTPS botocore already does this.
* `request_checksum_calculation` / `response_checksum_validation` = "when_required":
  botocore computes no CRC of its own on PUT and validates none on GET. Instead `put`
  and `create_if_absent` send the body's CRC-32C (`x-amz-checksum-crc32c`, ~0.5 ms per
  8 MiB with the `crc32c` package), which S3 verifies before storing: a body corrupted
  in flight is refused (BadDigest -> StorageUnavailable) instead of stored. Reads are
  verified by the segment format's own CRC-32C per batch and footer.
* retries: botocore "standard" mode, 3 attempts in total (throttling, 5xx, connection
  errors, with jittered exponential backoff); timeouts: 2 s connect, 10 s read, so a dead
  endpoint fails in seconds instead of hanging; a pool of at most 32 connections.

Every botocore/urllib3 exception is translated here into `errors.py` classes.
"""

from __future__ import annotations

import base64
import builtins
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import crc32c
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PART_BYTES,
    LIST_PAGE,
    BytesLike,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    as_bytes,
    batched,
    check_part_bytes,
    check_range,
    check_stream_args,
    normalize_root_prefix,
    validate_key,
    validate_prefix,
)
from .errors import (
    InvalidRange,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
)
from .stats import (
    RequestKind,
    StoreStats,
)
from .streams import (
    ObjectStream,
)

if TYPE_CHECKING:
    from botocore.config import Config


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class S3Options:
    """S3 client settings. The defaults are the production settings.

    `endpoint_url` and `region` default to None: botocore's own resolution from the
    environment and config files (see the module docstring).
    """

    endpoint_url: str | None = None
    region: str | None = None
    connect_timeout: float = 2.0
    read_timeout: float = 10.0
    max_attempts: int = 3
    max_pool_connections: int = 32
    payload_signing: bool = False
    put_crc32c: bool = True

    def resolved_region(self) -> str | None:
        return self.region or os.environ.get("AWS_REGION") or None

    def config_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `botocore.config.Config` (also `AioConfig`)."""
        return {
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            "retries": {"mode": "standard", "total_max_attempts": self.max_attempts},
            "max_pool_connections": self.max_pool_connections,
            "tcp_keepalive": True,
            "s3": {"payload_signing_enabled": self.payload_signing},
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
            "user_agent_appid": "skiff",
        }

    def config(self) -> Config:
        from botocore.config import Config

        return Config(**self.config_kwargs())


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> ("bucket", "some/prefix/")."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}")
    return bucket, normalize_root_prefix(prefix)


# --------------------------------------------------------------------------- errors

_RETRIABLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "BadDigest",
    "XAmzContentChecksumMismatch",
    "IncompleteBody",
    "ConditionalRequestConflict",
    "OperationAborted",
}


def translate_error(exc: BaseException, *, url: str, op: str, key: str | None) -> StorageError:
    """Map a botocore (or transport) exception to the project's storage errors."""
    where = f"{url}: {op}" + (f" {key!r}" if key is not None else "")
    if isinstance(exc, ClientError):
        error: Mapping[str, Any] = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "") or "")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = f"{where}: {code or status} {error.get('Message', '') or ''}".rstrip()
        if code == "NoSuchBucket":
            return StorageError(f"{message} (the bucket does not exist)", key=key)
        if code in ("NoSuchKey", "NotFound", "404") or (status == 404 and not code):
            return ObjectNotFound(message, key=key)
        if code == "PreconditionFailed" or status == 412:
            return PreconditionFailed(message, key=key)
        if code == "InvalidRange" or status == 416:
            return InvalidRange(message, key=key)
        if code in _RETRIABLE_CODES or status >= 500 or status in (408, 429):
            return StorageUnavailable(message, key=key)
        return StorageError(message, key=key)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return StorageError(f"{where}: no usable AWS credentials ({exc})", key=key)
    if isinstance(exc, BotoCoreError):
        # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError,
        # ResponseStreamingError, IncompleteReadError, ... are all transport failures; the
        # rest (e.g. ParamValidationError) would be bugs, and retrying will not fix them.
        from botocore.exceptions import (
            ConnectionError as BotoConnectionError,
        )
        from botocore.exceptions import (
            HTTPClientError,
            IncompleteReadError,
        )

        if isinstance(exc, HTTPClientError | BotoConnectionError | IncompleteReadError):
            return StorageUnavailable(f"{where}: {exc}", key=key)
        return StorageError(f"{where}: {exc}", key=key)
    if isinstance(exc, OSError | TimeoutError):
        return StorageUnavailable(f"{where}: {type(exc).__name__}: {exc}", key=key)
    return StorageError(f"{where}: {type(exc).__name__}: {exc}", key=key)


#: the exceptions a store call can raise that are translated (others are bugs and propagate)
TRANSLATED: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, OSError)


def was_retried(exc: BaseException) -> bool:
    """True if botocore sent the request more than once before this error.

    A conditional create whose first attempt reached S3 but whose answer was lost (a
    timeout, a reset) is retried by botocore, and the retry meets our own object: 412.
    `create_if_absent` then reads the object back and reports True if it holds our bytes.
    """
    if not isinstance(exc, ClientError):
        return False
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def crc32c_b64(body: bytes | memoryview) -> str:
    return base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode("ascii")


def retry_counter(stats: StoreStats) -> Callable[..., None]:
    """A `before-send` event handler counting retried HTTP attempts into `stats`."""

    def before_send(request: Any, **_: Any) -> None:
        header = request.headers.get("amz-sdk-request", b"")
        if isinstance(header, str):
            header = header.encode()
        if header and not header.startswith(b"attempt=1;") and header != b"attempt=1":
            stats.retried(1)

    return before_send


class S3Layout:
    """Bucket + prefix arithmetic and request arguments shared by both S3 flavours."""

    def __init__(self, bucket: str, prefix: str, options: S3Options) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.options = options
        self.url = f"s3://{bucket}/{prefix}".rstrip("/")

    def full(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def put_args(self, key: str, body: bytes | memoryview, *, if_none_match: bool) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.full(key), "Body": body}
        if self.options.put_crc32c:
            args["ChecksumCRC32C"] = crc32c_b64(body)
        if if_none_match:
            args["IfNoneMatch"] = "*"
        return args

    def get_args(self, key: str, range_header: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.full(key)}
        if range_header:
            args["Range"] = range_header
        return args

    def delete_args(self, batch: builtins.list[str]) -> dict[str, Any]:
        return {"Bucket": self.bucket, "Delete": {"Objects": [{"Key": k} for k in batch], "Quiet": True}}

    def list_args(self, prefix: str, token: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix, "MaxKeys": LIST_PAGE}
        if token:
            args["ContinuationToken"] = token
        return args

    def infos(self, page: Mapping[str, Any]) -> builtins.list[ObjectInfo]:
        cut = len(self.prefix)
        out = []
        for item in page.get("Contents", ()) or ():
            out.append(ObjectInfo(item["Key"][cut:], int(item["Size"]), utc(item["LastModified"])))
        return out

    def delete_errors(self, response: Mapping[str, Any]) -> StorageError | None:
        errors = response.get("Errors") or []
        if not errors:
            return None
        first = errors[0]
        message = (
            f"{self.url}: delete failed for {len(errors)} key(s), first {first.get('Key')!r}: "
            f"{first.get('Code')} {first.get('Message', '')}"
        )
        if all(e.get("Code") in _RETRIABLE_CODES for e in errors):
            return StorageUnavailable(message)
        return StorageError(message)

    def short_range(self, key: str, start: int, length: int, got: int) -> InvalidRange:
        return InvalidRange(
            f"{self.url}: range {start}+{length} is past the end of {key!r} (got {got} bytes)", key=key
        )


def utc(moment: datetime) -> datetime:
    """botocore gives `tzlocal()` datetimes; the interface promises UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def range_header(start: int, length: int) -> str:
    return f"bytes={start}-{start + length - 1}"


# --------------------------------------------------------------------------- the sync store


class S3Store(ObjectStore):
    """The sync S3 store (boto3). Thread-safe: one client, a bounded connection pool."""

    def __init__(self, bucket: str, prefix: str = "", *, options: S3Options | None = None) -> None:
        import boto3

        self.options = options or S3Options()
        self._layout = S3Layout(bucket, normalize_root_prefix(prefix), self.options)
        self.url = self._layout.url
        self.stats = StoreStats()
        session = boto3.session.Session()
        self._client: Any = session.client(
            "s3",
            endpoint_url=self.options.endpoint_url,
            region_name=self.options.resolved_region(),
            config=self.options.config(),
        )
        self._client.meta.events.register("before-send.s3", retry_counter(self.stats))

    def _fail(self, kind: RequestKind, exc: BaseException, key: str | None) -> StorageError:
        self.stats.error(kind)
        return translate_error(exc, url=self.url, op=kind, key=key)

    def put(self, key: str, data: BytesLike) -> None:
        body = as_bytes(data)
        args = self._layout.put_args(key, body, if_none_match=False)
        self.stats.request("put", bytes_out=len(body))
        try:
            self._client.put_object(**args)
        except TRANSLATED as exc:
            raise self._fail("put", exc, key) from exc

    def open_writer(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ObjectWriter:
        check_part_bytes(part_bytes)
        return _S3Writer(self, key, part_bytes)

    def create_if_absent(self, key: str, data: BytesLike) -> bool:
        body = as_bytes(data)
        args = self._layout.put_args(key, body, if_none_match=True)
        self.stats.request("create_if_absent", bytes_out=len(body))
        try:
            self._client.put_object(**args)
        except TRANSLATED as exc:
            err = translate_error(exc, url=self.url, op="create_if_absent", key=key)
            if isinstance(err, PreconditionFailed):
                return was_retried(exc) and self._holds(key, body)
            self.stats.error("create_if_absent")
            raise err from exc
        return True

    def _holds(self, key: str, body: bytes) -> bool:
        try:
            return self.get(key) == body
        except ObjectNotFound:
            return False

    def get(self, key: str) -> bytes:
        args = self._layout.get_args(key)
        self.stats.request("get")
        try:
            response = self._client.get_object(**args)
            with response["Body"] as stream:
                body: bytes = stream.read()
        except TRANSLATED as exc:
            raise self._fail("get", exc, key) from exc
        self.stats.received(len(body))
        return body

    def get_range(self, key: str, start: int, length: int) -> bytes:
        check_range(start, length)
        args = self._layout.get_args(key, range_header(start, length))
        self.stats.request("get_range")
        try:
            response = self._client.get_object(**args)
            with response["Body"] as stream:
                body: bytes = stream.read()
        except TRANSLATED as exc:
            raise self._fail("get_range", exc, key) from exc
        self.stats.received(len(body))
        if len(body) != length:
            self.stats.error("get_range")
            raise self._layout.short_range(key, start, length, len(body))
        return body

    def stream_get(self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ObjectStream:
        check_stream_args(start, chunk_size)
        args = self._layout.get_args(key, f"bytes={start}-" if start else None)
        self.stats.request("stream_get")
        try:
            body = self._client.get_object(**args)["Body"]
        except TRANSLATED as exc:
            raise self._fail("stream_get", exc, key) from exc

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(chunk_size)
            except TRANSLATED as exc:
                raise self._fail("stream_get", exc, key) from exc

        return ObjectStream(chunks(), body.close, self.stats)

    def delete_many(self, keys: Iterable[str]) -> None:
        fulls = [self._layout.full(k) for k in keys]
        for batch in batched(fulls):
            self.stats.request("delete")
            try:
                response = self._client.delete_objects(**self._layout.delete_args(batch))
            except TRANSLATED as exc:
                raise self._fail("delete", exc, None) from exc
            err = self._layout.delete_errors(response)
            if err is not None:
                self.stats.error("delete")
                raise err

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        return self._list(prefix)

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        token: str | None = None
        while True:
            self.stats.request("list")
            try:
                page = self._client.list_objects_v2(**self._layout.list_args(prefix, token))
            except TRANSLATED as exc:
                raise self._fail("list", exc, prefix) from exc
            yield from self._layout.infos(page)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def head(self, key: str) -> ObjectInfo:
        args = self._layout.get_args(key)
        self.stats.request("head")
        try:
            response = self._client.head_object(**args)
        except TRANSLATED as exc:
            raise self._fail("head", exc, key) from exc
        return ObjectInfo(key, int(response["ContentLength"]), utc(response["LastModified"]))

    def close(self) -> None:
        self._client.close()


__all__ = ["S3Options", "S3Store", "parse_s3_url", "translate_error"]


class _S3Writer(ObjectWriter):
    """`S3Store.open_writer`: one PUT for an object smaller than a part, else a multipart
    upload begun at the first full part (each part with its CRC-32C when `put_crc32c`)."""

    def __init__(self, store: S3Store, key: str, part_bytes: int) -> None:
        super().__init__(key)
        self._store = store
        self._part_bytes = part_bytes
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: builtins.list[dict[str, Any]] = []

    def _call(self, kind: RequestKind, fn: Callable[..., Any], *, nbytes: int = 0, **args: Any) -> Any:
        self._store.stats.request(kind, bytes_out=nbytes)
        try:
            return fn(**args)
        except TRANSLATED as exc:
            raise self._store._fail(kind, exc, self.key) from exc

    def _target(self) -> dict[str, Any]:
        layout = self._store._layout
        return {"Bucket": layout.bucket, "Key": layout.full(self.key)}

    def _write(self, data: BytesLike) -> None:
        self._buf += data
        while len(self._buf) >= self._part_bytes:
            part = bytes(self._buf[: self._part_bytes])
            del self._buf[: self._part_bytes]
            self._upload(part)

    def _upload(self, part: bytes) -> None:
        client = self._store._client
        crc = self._store.options.put_crc32c
        if self._upload_id is None:
            extra: dict[str, Any] = {"ChecksumAlgorithm": "CRC32C"} if crc else {}
            answer = self._call(
                "create_multipart_upload", client.create_multipart_upload, **self._target(), **extra
            )
            self._upload_id = answer["UploadId"]
        number = len(self._parts) + 1
        args: dict[str, Any] = {
            **self._target(),
            "UploadId": self._upload_id,
            "PartNumber": number,
            "Body": part,
        }
        entry: dict[str, Any] = {"PartNumber": number}
        if crc:
            args["ChecksumCRC32C"] = entry["ChecksumCRC32C"] = crc32c_b64(part)
        answer = self._call("upload_part", client.upload_part, nbytes=len(part), **args)
        entry["ETag"] = answer["ETag"]
        self._parts.append(entry)

    def _commit(self) -> None:
        rest, self._buf = bytes(self._buf), bytearray()
        if self._upload_id is None:
            self._store.put(self.key, rest)
            return
        if rest:
            self._upload(rest)
        self._call(
            "complete_multipart_upload",
            self._store._client.complete_multipart_upload,
            **self._target(),
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )
        self._upload_id = None

    def _abort(self) -> None:
        self._buf = bytearray()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            self._call(
                "abort_multipart_upload",
                self._store._client.abort_multipart_upload,
                **self._target(),
                UploadId=upload_id,
            )

"""`LocalMetadataClient`: every metadata operation (`metadata.wire.operations`) over a
`MetadataService` in this process (the playground, tests, benchmarks), forwarded
generically by name: an operation is the service method of the same name.

Each call runs the blocking service method in a dedicated thread pool (as
`asyncio.to_thread` would, but bounded and not shared with the rest of the process),
sized like the database pool; the service's async methods (the long poll) are awaited
directly. Raises `MetadataError` (Kafka error code) when the service refused the request
and `MetadataUnavailable` (retriable) when the database is down or the client closed.
This module imports the service and so SQLAlchemy: processes that only talk HTTP use
`metadata.wire.http_client` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

from skiff.metadata.db import is_db_unavailable
from skiff.metadata.errors import INVALID_REQUEST, MetadataError, MetadataUnavailable
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.codec import Operation
from skiff.metadata.wire.operations import OperationForwarder
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from skiff.metadata.wire.operations import MetadataClient

T = TypeVar("T")


class LocalMetadataClient(OperationForwarder):
    """Every metadata operation over a `MetadataService` in this process."""

    # As HttpMetadataClient.observe_call: each operation's name and seconds, whatever its outcome.
    observe_call: Callable[[str, float], None] | None = None

    def __init__(self, service: MetadataService, *, max_workers: int = 8, owns_service: bool = False) -> None:
        self.service = service
        self._owns_service = owns_service
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="skiff-metadata")
        self._closed = False

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise MetadataUnavailable("metadata client is closed")
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            with _database_errors():
                if inspect.iscoroutinefunction(fn):
                    return cast(T, await fn(*args, **kwargs))
                return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        except RuntimeError as e:
            if self._closed:  # the executor was shut down under us
                raise MetadataUnavailable("metadata client is closed") from e
            raise
        finally:
            if self.observe_call is not None:  # fn is the service method of the operation's name
                self.observe_call(fn.__name__, time.perf_counter() - started)

    def _forward(self, op: Operation) -> Callable[..., Any]:
        method = getattr(self.service, op.name)

        async def forward(*args: Any, **kwargs: Any) -> Any:
            return await self._run(method, **op.bind(args, kwargs))

        return forward

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        if self._owns_service:
            self.service.close()


class SyncLocalMetadataClient(OperationForwarder):
    """Every metadata operation, blocking, over a `MetadataService` in this process (the
    command line on a database URL, tests of synchronous callers); errors as
    `LocalMetadataClient`'s."""

    def __init__(self, service: MetadataService, *, owns_service: bool = False) -> None:
        self.service = service
        self._owns_service = owns_service
        self._closed = False

    def _forward(self, op: Operation) -> Callable[..., Any]:
        method = getattr(self.service, op.name)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self._closed:
                raise MetadataUnavailable("metadata client is closed")
            arguments = op.bind(args, kwargs)
            with _database_errors():
                if inspect.iscoroutinefunction(method):
                    return asyncio.run(method(**arguments))
                return method(**arguments)

        return forward

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns_service:
                self.service.close()


@contextlib.contextmanager
def _database_errors() -> Iterator[None]:
    """The database's errors as the clients' (see the module docstring)."""
    try:
        yield
    except SQLAlchemyError as e:
        if is_db_unavailable(e):
            raise MetadataUnavailable(f"metadata database unavailable: {e}") from e
        raise MetadataError(
            INVALID_REQUEST, f"refused by the metadata database: {getattr(e, 'orig', e)}"
        ) from e


def local_metadata_client(service: MetadataService, **kwargs: Any) -> MetadataClient:
    """A `LocalMetadataClient` typed as the interface it forwards."""
    return cast("MetadataClient", LocalMetadataClient(service, **kwargs))

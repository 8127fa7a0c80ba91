"""The metadata service and its clients for component tests (a pytest plugin, registered in
tests/conftest.py).

Fixtures:

* `clock` -> `FakeClock`: an injected clock in milliseconds, starting at `T0_MS`; tests move
  it by assigning `clock.now` or calling `clock.advance(ms)`.
* `metadata_service` -> `MetadataService` over `db_url` (tests/support/pg.py: a SQLite file,
  then a fresh PostgreSQL database, so every test using it runs on both) with `clock`,
  closed afterwards. A module that needs rows before each test overrides it by the same
  name and asks for the original: `def metadata_service(metadata_service): ...`.
* `md` -> the client under test, parametrised `local` (`LocalMetadataClient`, in-process)
  and `http` (`HttpMetadataClient` on the real FastAPI app through httpx's ASGI transport),
  both over `metadata_service`, closed afterwards. It is typed as the local client for
  brevity; both have the same API.

So a test asking for `md` runs four times: {local, http} x {sqlite, postgresql}.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.http_client import HttpMetadataClient

T0_MS = 1_700_000_000_000


class FakeClock:
    """A clock the test moves: calling it returns `now` (milliseconds since the epoch)."""

    def __init__(self, now: int = T0_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    """The injected clock of `metadata_service`, at `T0_MS`."""
    return FakeClock()


@pytest.fixture
def metadata_service(db_url: str, clock: FakeClock) -> Iterator[MetadataService]:
    """A metadata service over an empty database, once per backend (see `db_url`)."""
    service = MetadataService.from_url(db_url, clock=clock)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(params=["local", "http"])
async def md(
    request: pytest.FixtureRequest, metadata_service: MetadataService
) -> AsyncIterator[LocalMetadataClient]:
    """The metadata client under test: in-process, then over HTTP (the real app, ASGI)."""
    client: LocalMetadataClient | HttpMetadataClient
    if request.param == "local":
        client = LocalMetadataClient(metadata_service)
    else:
        client = HttpMetadataClient(
            "http://metadata.test", transport=httpx.ASGITransport(app=create_app(metadata_service))
        )
    try:
        yield client  # type: ignore[misc]
    finally:
        await client.close()

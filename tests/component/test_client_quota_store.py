"""metadata.security.quotas through both clients (in-process and HTTP over the real app) on SQLite
and PostgreSQL: values set, changed and removed per entity and key, the version moves only on a
real change, validate_only changes nothing, describe filters are Kafka's, refusals are per
alteration with Kafka's messages."""

from __future__ import annotations

import pytest
from skiff.metadata.errors import MetadataError
from skiff.metadata.security.quota_types import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    ClientQuotaEntry,
    QuotaAlteration,
    QuotaEntity,
    QuotaFilterComponent,
    QuotaOp,
)
from skiff.metadata.server.local_client import LocalMetadataClient

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


ALICE = QuotaEntity(((USER, "alice"),))
ALICE_APP = QuotaEntity(((CLIENT_ID, "app"), (USER, "alice")))
DEFAULT_USER = QuotaEntity(((USER, None),))
APP = QuotaEntity(((CLIENT_ID, "app"),))


def order(entities: list[QuotaEntity]) -> list[QuotaEntity]:
    return sorted(entities, key=QuotaEntity.text)


def alter(entity: QuotaEntity, **ops: float | None) -> QuotaAlteration:
    return QuotaAlteration(entity, tuple(QuotaOp(k, v) for k, v in ops.items()))


async def test_set_change_remove_and_the_version(md: LocalMetadataClient) -> None:
    v0 = await md.client_quota_version()
    assert await md.list_client_quotas() == (v0, [])
    v1, errors = await md.alter_client_quotas(
        [
            alter(ALICE, producer_byte_rate=1024.0, request_percentage=50.0),
            alter(DEFAULT_USER, consumer_byte_rate=2048.0),
        ],
        False,
    )
    assert errors == [None, None] and v1 > v0
    version, entries = await md.list_client_quotas()
    assert version == v1 == await md.client_quota_version()
    assert sorted(entries, key=lambda e: e.entity.text()) == sorted(
        [
            ClientQuotaEntry(ALICE, (("producer_byte_rate", 1024.0), ("request_percentage", 50.0))),
            ClientQuotaEntry(DEFAULT_USER, (("consumer_byte_rate", 2048.0),)),
        ],
        key=lambda e: e.entity.text(),
    )
    # the same values again: nothing changes, the version stays
    assert await md.alter_client_quotas([alter(ALICE, producer_byte_rate=1024.0)], False) == (v1, [None])
    # removing an absent key changes nothing either
    assert await md.alter_client_quotas([alter(APP, producer_byte_rate=None)], False) == (v1, [None])
    v2, _ = await md.alter_client_quotas(
        [alter(ALICE, producer_byte_rate=None, request_percentage=75.0)], False
    )
    assert v2 > v1
    v3, _ = await md.alter_client_quotas([alter(ALICE, request_percentage=None)], False)
    _, entries = await md.list_client_quotas()
    assert v3 > v2 and [e.entity for e in entries] == [DEFAULT_USER]  # an entity without quotas is gone


async def test_validate_only_and_refusals_change_nothing(md: LocalMetadataClient) -> None:
    v0 = await md.client_quota_version()
    version, errors = await md.alter_client_quotas([alter(ALICE, producer_byte_rate=10.0)], True)
    assert (version, errors) == (v0, [None])
    assert (await md.list_client_quotas())[1] == []
    version, errors = await md.alter_client_quotas(
        [
            alter(ALICE, producer_byte_rate=10.0),
            alter(APP, foobar=1.0),
            alter(ALICE_APP, consumer_byte_rate=-1.0),
        ],
        False,
    )
    assert errors == [
        None,
        "Invalid configuration key foobar",
        "Quota consumer_byte_rate must be greater than 0",
    ]
    _, entries = await md.list_client_quotas()
    assert [e.entity for e in entries] == [ALICE]  # the valid alteration is applied, the others not


async def test_describe_filters_as_kafka(md: LocalMetadataClient) -> None:
    await md.alter_client_quotas(
        [alter(e, producer_byte_rate=100.0) for e in (ALICE, ALICE_APP, DEFAULT_USER, APP)], False
    )

    async def entities(*components: tuple[str, int, str | None], strict: bool = False) -> list[QuotaEntity]:
        found = await md.describe_client_quotas([QuotaFilterComponent(*c) for c in components], strict)
        return order([e.entity for e in found])

    assert await entities((USER, MATCH_EXACT, "alice")) == order([ALICE, ALICE_APP])
    assert await entities((USER, MATCH_EXACT, "alice"), strict=True) == [ALICE]
    assert await entities((USER, MATCH_DEFAULT, None)) == [DEFAULT_USER]
    assert await entities((CLIENT_ID, MATCH_SPECIFIED, None)) == order([ALICE_APP, APP])
    assert len(await entities()) == 4
    with pytest.raises(MetadataError) as refused:
        await md.describe_client_quotas([QuotaFilterComponent("group", MATCH_EXACT, "g")], False)
    assert refused.value.error_code == 35 and refused.value.message == "Unsupported entity type group"
    with pytest.raises(MetadataError) as refused:
        await md.describe_client_quotas([QuotaFilterComponent(USER, MATCH_EXACT, None)], False)
    assert refused.value.error_code == 42

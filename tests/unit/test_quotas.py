"""The quota math (agent.quotas) and Kafka's quota rules (metadata.security.quota_types), pure.

Kafka's numbers are checked by hand: Rate over 11 windows of 1 s, the window counted as at
least 10 s, throttle = (rate - bound) / bound x window; the resolution order of
DefaultQuotaCallback; ClientQuotaControlManager's and ClientQuotasImage's messages.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from skiff.agent.quotas import (
    QuotaBook,
    QuotaTable,
    QuotaType,
    SampledRate,
    WindowConfig,
    throttle_ms,
    user_of,
)
from skiff.metadata.security.quota_types import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaEntry,
    QuotaAlteration,
    QuotaEntity,
    QuotaFilterComponent,
    QuotaOp,
    alteration_errors,
    entity_from,
    filter_error,
    filter_matches,
)

W = WindowConfig()  # Kafka's defaults: 11 samples of 1 s


def entity(**parts: str | None) -> QuotaEntity:
    pairs = [(CLIENT_ID if k == "client_id" else USER, v) for k, v in parts.items()]
    made, why = entity_from(pairs)
    assert made is not None, why
    return made


# --------------------------------------------------------------------------- SampledRate


def test_a_new_rate_is_averaged_over_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(W)
    rate.record(10_000, now_ms=0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.rate(0) == pytest.approx(1_000.0)
    # 500 ms later: still 10 whole windows counted (0 full windows elapsed, 10 added)
    assert rate.rate(500) == pytest.approx(10_000 / 10.5)


def test_windows_roll_and_old_ones_expire() -> None:
    rate = SampledRate(W)
    for second in range(30):  # 1,000 bytes every second for 30 s
        rate.record(1_000, now_ms=second * 1_000)
    # the 11 windows hold the last 11 seconds: 11,000 bytes over the 10 s since the oldest began
    assert rate.rate(29_000) == pytest.approx(11_000 / 10.0)
    # 12 s of silence later every window has expired
    assert rate.rate(29_000 + 12_000) == 0.0


@given(st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 5_000)), min_size=1, max_size=60))
def test_rate_never_counts_more_than_was_recorded(events: list[tuple[int, int]]) -> None:
    rate = SampledRate(W)
    now = 0
    total = 0
    for value, step in events:
        now += step
        rate.record(value, now)
        total += value
        assert 0.0 <= rate.rate(now) * rate.window_size_ms(now) / 1000 <= total + 1e-6


def test_throttle_time_is_what_brings_the_rate_back_to_the_bound() -> None:
    assert throttle_ms(rate=1_500, bound=1_000, window_size_ms=10_000) == 5_000
    assert throttle_ms(rate=999, bound=1_000, window_size_ms=10_000) == 0
    # a steady 1,000 B/s for 10 s, then a 5,000-byte burst: 1,500 B/s over the 10 s window;
    # 5 s of silence bring the total of the (then 15 s) window back to the bound
    rate = SampledRate(W)
    for second in range(11):
        rate.record(1_000, second * 1_000)
    rate.record(4_000, 10_000)
    assert rate.rate(10_000) == pytest.approx(1_500.0)
    t = throttle_ms(rate.rate(10_000), 1_000, rate.window_size_ms(10_000))
    assert t == 5_000
    assert rate.rate(10_000 + t) <= 1_000.0


# --------------------------------------------------------------------------- QuotaBook


def test_book_throttles_over_the_bound_and_counts_it() -> None:
    book = QuotaBook(QuotaType.PRODUCE, W)
    key = ("alice", "")
    assert book.record(key, bound=1_000, value=9_000, now_ms=0) == 0  # 900 B/s over 10 s
    assert book.record(key, bound=1_000, value=6_000, now_ms=0) == 5_000  # 1,500 B/s
    assert book.throttled_clients(now_ms=100) == 1
    assert book.throttled_clients(now_ms=5_000) == 0
    assert (book.throttle_ms_total, book.throttled_total) == (5_000, 1)


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    book = QuotaBook(QuotaType.REQUEST, W)
    # 100 % of a thread for 10 s against a 10 % quota would be 90 s; Kafka bounds it to 1 s
    assert book.record(("", "c"), bound=10.0, value=1_000.0, now_ms=0) == 1_000


def test_unrecord_takes_a_throttled_fetch_back_out() -> None:
    book = QuotaBook(QuotaType.FETCH, W)
    key = ("", "c")
    book.record(key, 1_000, 9_000, 0)
    assert book.record(key, 1_000, 50_000, 0) > 0
    book.unrecord(key, 50_000, 0)
    assert book.rates[key].rate(0) == pytest.approx(900.0)


def test_book_forgets_the_least_recently_used_beyond_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("skiff.agent.quotas.MAX_SENSORS", 3)
    book = QuotaBook(QuotaType.PRODUCE, W)
    for i in range(5):
        book.record(("", f"c{i}"), 1e9, 1, now_ms=i)
    assert list(book.rates) == [("", "c2"), ("", "c3"), ("", "c4")]


# --------------------------------------------------------------------------- resolution


def _entry(e: QuotaEntity, **values: float) -> ClientQuotaEntry:
    return ClientQuotaEntry(e, tuple(sorted(values.items())))


LEVELS = [  # Kafka's order, most specific first, with the metric key each implies
    (entity(user="alice", client_id="app"), ("alice", "app")),
    (entity(user="alice", client_id=None), ("alice", "app")),
    (entity(user="alice"), ("alice", "")),
    (entity(user=None, client_id="app"), ("alice", "app")),
    (entity(user=None, client_id=None), ("alice", "app")),
    (entity(user=None), ("alice", "")),
    (entity(client_id="app"), ("", "app")),
    (entity(client_id=None), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_entity_wins(level: int) -> None:
    # every level from `level` down has a quota; the bound tells which one was taken
    entries = [_entry(e, producer_byte_rate=1_000 + i) for i, (e, _) in enumerate(LEVELS) if i >= level]
    found = QuotaTable(entries).resolve(QuotaType.PRODUCE, "alice", "app")
    assert found is not None
    assert (found.bound, found.key) == (1_000 + level, LEVELS[level][1])


def test_resolution_is_per_quota_key_and_absent_means_unlimited() -> None:
    table = QuotaTable(
        [
            _entry(entity(user="alice"), consumer_byte_rate=10),
            _entry(entity(client_id="app"), producer_byte_rate=20),
        ]
    )
    produce = table.resolve(QuotaType.PRODUCE, "alice", "app")
    assert produce is not None and produce.bound == 20  # alice's entity has no produce quota
    fetch = table.resolve(QuotaType.FETCH, "alice", "app")
    assert fetch is not None and fetch.bound == 10
    assert table.resolve(QuotaType.REQUEST, "alice", "app") is None
    assert table.resolve(QuotaType.PRODUCE, "bob", "other") is None
    assert QuotaTable().empty and not table.empty


def test_user_of_principal() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"
    assert user_of("User:CN=a,O=b") == "CN=a,O=b"


# --------------------------------------------------------------------------- Kafka's rules


def test_entity_validation_messages() -> None:
    assert entity_from([])[1] == "Invalid empty client quota entity"
    assert entity_from([(USER, "a"), (USER, "b")])[1] == (
        "Invalid client quota entity, duplicate entity entry user"
    )
    assert entity_from([("group", "g")])[1] == "Unhandled client quota entity type: group"
    assert entity_from([(CLIENT_ID, "")])[1] == "Empty client-id not supported"
    made, why = entity_from([(USER, "a"), (CLIENT_ID, None)])
    assert why is None and made == QuotaEntity(((CLIENT_ID, None), (USER, "a")))


def _alter(e: QuotaEntity, *ops: tuple[str, float | None]) -> QuotaAlteration:
    return QuotaAlteration(e, tuple(QuotaOp(k, v) for k, v in ops))


def test_alteration_validation_messages() -> None:
    alice = entity(user="alice")
    errors = alteration_errors(
        [
            _alter(alice, (PRODUCER_BYTE_RATE, 1024.0), (REQUEST_PERCENTAGE, 12.5)),
            _alter(entity(client_id="x"), ("foobar", 1.0)),
            _alter(entity(client_id="y"), (CONSUMER_BYTE_RATE, 0.0)),
            _alter(entity(client_id="z"), (PRODUCER_BYTE_RATE, 10.5)),
            _alter(entity(client_id="w"), (PRODUCER_BYTE_RATE, 1.0), (PRODUCER_BYTE_RATE, 2.0)),
            _alter(alice, (CONSUMER_BYTE_RATE, 1.0)),
            _alter(entity(client_id="v"), ("foobar", None)),  # removing an unknown key: fine
            _alter(QuotaEntity(((IP, "127.0.0.1"),)), ("connection_creation_rate", 5.0)),
        ]
    )
    assert errors == [
        None,
        "Invalid configuration key foobar",
        "Quota consumer_byte_rate must be greater than 0",
        "Configuration producer_byte_rate must be a Long value",
        "Duplicate quota key producer_byte_rate not updating quota for this entity "
        "ClientQuotaEntity(entries={client-id=w})",
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})",
        None,
        "Unhandled client quota entity type: ip",
    ]


def _c(entity_type: str, match_type: int, match: str | None = None) -> QuotaFilterComponent:
    return QuotaFilterComponent(entity_type, match_type, match)


def test_describe_filter_errors() -> None:
    assert filter_error([_c("", MATCH_EXACT, "a")]) == ("invalid_request", "Invalid empty entity type.")
    assert filter_error([_c(USER, MATCH_SPECIFIED), _c(USER, MATCH_DEFAULT)]) == (
        "invalid_request",
        "Entity type user cannot appear more than once in the filter.",
    )
    assert filter_error([_c("group", MATCH_EXACT, "g")]) == (
        "unsupported_version",
        "Unsupported entity type group",
    )
    assert filter_error([_c(USER, MATCH_EXACT)])[1].startswith("Request specified MATCH_TYPE_EXACT")  # type: ignore[index]
    assert filter_error([_c(USER, MATCH_DEFAULT, "a")])[1].startswith("Request specified MATCH_TYPE_DEFAULT")  # type: ignore[index]
    assert filter_error([_c(USER, 7)]) == ("unsupported_version", "Unknown match type 7")
    assert filter_error([_c(IP, MATCH_SPECIFIED), _c(USER, MATCH_SPECIFIED)])[0] == "invalid_request"  # type: ignore[index]
    assert filter_error([_c(USER, MATCH_EXACT, "a"), _c(CLIENT_ID, MATCH_SPECIFIED)]) is None


def test_describe_filter_matching() -> None:
    alice_app = entity(user="alice", client_id="app")
    alice = entity(user="alice")
    default_user = entity(user=None)
    app = entity(client_id="app")
    everything = [alice_app, alice, default_user, app]

    def match(components: list[QuotaFilterComponent], strict: bool = False) -> list[QuotaEntity]:
        return [e for e in everything if filter_matches(components, strict, e)]

    assert match([_c(USER, MATCH_EXACT, "alice")]) == [alice_app, alice]
    assert match([_c(USER, MATCH_EXACT, "alice")], strict=True) == [alice]
    assert match([_c(USER, MATCH_DEFAULT)]) == [default_user]
    assert match([_c(USER, MATCH_SPECIFIED)]) == [alice_app, alice, default_user]
    assert match([_c(CLIENT_ID, MATCH_SPECIFIED)], strict=True) == [app]
    assert match([]) == everything
    assert match([], strict=True) == []


def test_room_is_what_may_still_be_recorded_within_the_bound() -> None:
    book = QuotaBook(QuotaType.FETCH, W)
    key = ("", "c")
    assert book.room(key, bound=1_000, now_ms=0) == 10_000  # a new client: 10 windows of the quota
    book.record(key, 1_000, 4_000, now_ms=0)
    assert book.room(key, bound=1_000, now_ms=0) == 6_000
    assert book.record(key, 1_000, 6_000, now_ms=0) == 0  # exactly the room: not throttled
    assert book.room(key, bound=1_000, now_ms=0) == 0


def test_a_consumer_bounded_by_its_room_reaches_its_quota() -> None:
    """A simulated consumer of a backlog (every fetch full), 5 ms between fetches: over two
    whole windows after the first, it reads its quota within 1 %."""
    book = QuotaBook(QuotaType.FETCH, W)
    key, bound = ("", "c"), 200_000.0
    served: list[tuple[int, float]] = []
    now = 0
    while now < 40_000:
        size = max(min(book.room(key, bound, now), 10 * bound), 16_000)
        throttle = book.record(key, bound, size, now)
        if throttle:
            book.unrecord(key, size, now)
        else:
            served.append((now, size))
        now += max(throttle, 5)
    window = [s for t, s in served if 11_000 <= t < 33_000]
    assert sum(window) / 22.0 == pytest.approx(bound, rel=0.01)

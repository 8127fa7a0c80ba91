"""The commit feed: tell waiting agents, at once, that partitions' high watermarks moved.

Why: a consumer long-polling agent A at the tail of a partition must be answered as soon
as a producer's data is committed through agent B. Agents learn of such commits by
long-polling the metadata service (`wait_for_commits`), which answers the moment a commit
touches one of the watched partitions: the added latency is one metadata round trip,
instead of up to one poll interval of periodic polling.

Pieces:
- `CommitFeed` (thread-safe): `publish(keys)` is called after every committed transaction
  (from the committing thread); `subscribe(keys)` returns a `Subscription` whose asyncio
  event is set (via `call_soon_threadsafe`) when any of its keys is published.
  `publish_all()` wakes every subscription (used when news may have been missed).
- Several metadata replicas over one PostgreSQL: each commit also runs
  `pg_notify('skiff_commits', payload)` inside its transaction (delivered only if it
  commits), and every replica runs a `PgCommitListener` thread (`LISTEN skiff_commits`)
  that publishes what other replicas committed into its own feed. Payload: comma-separated
  `<topic id hex>:<partition>` tokens, or `*` (everything may have moved) when it would
  pass `MAX_NOTIFY_PAYLOAD_BYTES` (PostgreSQL's limit is 8000 bytes). After a lost
  connection the listener publishes `*` once it is back, since notifications sent while it
  was away are gone.
- `wait_for_commits(feed, read_states, known, timeout_ms)`: subscribe first, then read the
  current watermarks (so a commit between the caller's last look and the subscription is
  not missed), return the partitions whose watermark passed the caller's `known` value (or
  that no longer exist) at once; otherwise wait for a publication of one of the keys or
  the timeout, read again and return what moved (possibly nothing). Each answer carries
  the partition's last stable offset at that high watermark (the LSO moves only with a
  commit, of markers or of transactional data, so with the high watermark): agents keep
  it beside the watermark, and a read_committed fetch parked at an LSO that did not move
  waits on without asking metadata where records are.

Limits: `MAX_WATCHED_PARTITIONS` keys per wait, `MAX_WAIT_MS` per wait and
`MAX_SUBSCRIPTIONS` concurrent waits per process (past it, `wait_for_commits` answers at
once with nothing and the agent falls back to its poll interval).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence

from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.types import PartitionKey, PartitionState, PartitionWatermark

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]

MAX_WATCHED_PARTITIONS = 20_000
MAX_WAIT_MS = 30_000
MAX_SUBSCRIPTIONS = 4_096
MAX_NOTIFY_PAYLOAD_BYTES = 7_900
NOTIFY_CHANNEL = "skiff_commits"


class Subscription:
    """Keys being watched and the event set when one of them is published."""

    __slots__ = ("keys", "event", "loop")

    def __init__(self, keys: frozenset[Key], loop: asyncio.AbstractEventLoop) -> None:
        self.keys = keys
        self.event = asyncio.Event()
        self.loop = loop

    def _wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


class CommitFeed:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[Key, set[Subscription]] = {}
        self._all: set[Subscription] = set()

    @property
    def subscriptions(self) -> int:
        return len(self._all)

    def subscribe(self, keys: Iterable[Key]) -> Subscription | None:
        """Watch `keys` from the running loop; None when the process is at its limit."""
        sub = Subscription(frozenset(keys), asyncio.get_running_loop())
        with self._lock:
            if len(self._all) >= MAX_SUBSCRIPTIONS:
                return None
            self._all.add(sub)
            for key in sub.keys:
                self._by_key.setdefault(key, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._all.discard(sub)
            for key in sub.keys:
                subs = self._by_key.get(key)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._by_key[key]

    def publish(self, keys: Iterable[Key]) -> None:
        woken: set[Subscription] = set()
        with self._lock:
            if not self._by_key:
                return
            for key in keys:
                subs = self._by_key.get(key)
                if subs:
                    woken.update(subs)
        for sub in woken:
            sub._wake()

    def publish_all(self) -> None:
        with self._lock:
            woken = list(self._all)
        for sub in woken:
            sub._wake()


def notify_payload(keys: Iterable[Key]) -> str:
    """The `pg_notify` payload for a commit touching `keys` (see the module docstring)."""
    tokens = [f"{t.hex}:{p}" for t, p in keys]
    payload = ",".join(tokens)
    return payload if len(payload) <= MAX_NOTIFY_PAYLOAD_BYTES else "*"


def parse_payload(payload: str) -> list[Key] | None:
    """Keys of a notification; None means "everything" (`*` or a payload we cannot read)."""
    if payload == "*":
        return None
    keys = []
    try:
        for token in payload.split(","):
            tid, part = token.split(":")
            keys.append((uuid.UUID(hex=tid), int(part)))
    except ValueError:
        return None
    return keys


def _moved(known: Sequence[PartitionWatermark], states: Sequence[PartitionState]) -> list[PartitionWatermark]:
    out = []
    for k, s in zip(known, states, strict=True):
        if s.error_code or s.high_watermark > k.high_watermark:
            out.append(
                PartitionWatermark(
                    k.topic_id, k.partition, s.high_watermark, s.error_code, s.last_stable_offset
                )
            )
    return out


async def wait_for_commits(
    feed: CommitFeed,
    read_states: Callable[[Sequence[PartitionKey]], Awaitable[list[PartitionState]]],
    known: Sequence[PartitionWatermark],
    timeout_ms: int,
) -> list[PartitionWatermark]:
    """The partitions of `known` whose high watermark is past the known one (or that
    failed, e.g. were deleted), as soon as there is one, or [] after `timeout_ms`."""
    if len(known) > MAX_WATCHED_PARTITIONS:
        raise MetadataError(
            INVALID_REQUEST, f"{len(known)} partitions watched; at most {MAX_WATCHED_PARTITIONS}"
        )
    if not known:
        return []
    timeout_ms = max(0, min(timeout_ms, MAX_WAIT_MS))
    keys = [PartitionKey(k.topic_id, k.partition) for k in known]
    sub = feed.subscribe((k.topic_id, k.partition) for k in known)
    try:
        moved = _moved(known, await read_states(keys))
        if moved or sub is None or timeout_ms == 0:
            return moved
        try:
            await asyncio.wait_for(sub.event.wait(), timeout_ms / 1000.0)
        except TimeoutError:
            return []
        return _moved(known, await read_states(keys))
    finally:
        if sub is not None:
            feed.unsubscribe(sub)


class PgCommitListener:
    """A thread that LISTENs on PostgreSQL for other replicas' commits and publishes them.

    `connect` opens a psycopg connection in autocommit mode; the thread reconnects (after
    `retry_s`) when it fails, and publishes `*` after each reconnection.
    """

    def __init__(self, feed: CommitFeed, connect: Callable[[], object], *, retry_s: float = 1.0) -> None:
        self._feed = feed
        self._connect = connect
        self._retry_s = retry_s
        self._stop = threading.Event()
        self.listening = threading.Event()  # set while LISTEN is in effect
        self._thread = threading.Thread(target=self._run, name="skiff-commit-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                conn = self._connect()
                try:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")  # type: ignore[attr-defined]
                    self.listening.set()
                    if not first:
                        self._feed.publish_all()
                    first = False
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=1.0):  # type: ignore[attr-defined]
                            keys = parse_payload(n.payload)
                            if keys is None:
                                self._feed.publish_all()
                            else:
                                self._feed.publish(keys)
                finally:
                    self.listening.clear()
                    conn.close()  # type: ignore[attr-defined]
            except Exception as exc:  # boundary: the listener thread must not die; it reconnects
                first = False
                log.warning("commit listener lost PostgreSQL (%s); retrying", exc)
                self._stop.wait(self._retry_s)

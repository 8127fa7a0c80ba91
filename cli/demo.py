"""`skiff playground --demo`: sample traffic, so a new user sees data, groups and compaction at once.

A background role of the playground (agent.runtime's `BackgroundRole`) that talks to the
playground's own Kafka listener with confluent-kafka, as any client would:

- topics (created through the Kafka admin API if missing, 3 partitions each):
  `demo-orders` (JSON orders, keyed by order id), `demo-clicks` (page views, no key) and
  `demo-customers` (`cleanup.policy=compact`, `min.cleanable.dirty.ratio=0.1`: the latest
  profile of each of `CUSTOMERS` customers, rewritten again and again, so the playground's
  maintenance pass soon compacts the older versions away);
- a producer writing `RECORDS_PER_SECOND` records per second in all, spread over the three;
- a consumer group `demo-dashboard` reading `demo-orders` and committing, so
  `skiff groups describe demo-dashboard` shows members, offsets and lag.

Both run in daemon threads and stop on `close()` (each loop waits at most `POLL_S`
between checks of the stop flag; the join is bounded by `STOP_TIMEOUT_S`); the playground
closes it before its agent drains, so the consumer leaves its group at once. Errors of the
clients are logged once per kind and never stop the playground.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

TOPICS = {
    "demo-orders": {},
    "demo-clicks": {},
    "demo-customers": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"},
}
PARTITIONS = 3
GROUP = "demo-dashboard"
CUSTOMERS = 20
RECORDS_PER_SECOND = 20
POLL_S = 0.5
STOP_TIMEOUT_S = 3.0  # for both threads together
_PAGES = ("/", "/pricing", "/docs", "/blog", "/signup")
_CITIES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Perth")


def sample_record(i: int, rng: random.Random) -> tuple[str, str | None, str]:
    """The `i`th demo record: (topic, key, JSON value); every third topic in turn."""
    kind = i % 3
    if kind == 0:
        order = {"order_id": i, "customer": f"c{rng.randrange(CUSTOMERS)}", "amount": rng.randrange(5, 500)}
        return "demo-orders", f"o{i}", json.dumps(order)
    if kind == 1:
        return "demo-clicks", None, json.dumps({"page": rng.choice(_PAGES), "ms": rng.randrange(20, 900)})
    customer = f"c{rng.randrange(CUSTOMERS)}"
    profile = {"customer": customer, "city": rng.choice(_CITIES), "version": i}
    return "demo-customers", customer, json.dumps(profile)


class DemoTraffic:
    """The demo's producer and consumer group (module docstring); a BackgroundTask."""

    def __init__(self, bootstrap: str, records_per_second: int = RECORDS_PER_SECOND) -> None:
        self.bootstrap = bootstrap
        self.records_per_second = max(records_per_second, 1)
        self.stop = threading.Event()
        self.topics_ready = threading.Event()  # the consumer subscribes once they exist
        self.produced = 0
        self.consumed = 0
        self._threads: list[threading.Thread] = []
        self._reported: set[str] = set()

    def start(self) -> None:
        for target, name in ((self._produce, "demo-producer"), (self._consume, "demo-consumer")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        print(
            "Demo traffic: producing to demo-orders, demo-clicks and demo-customers (compacted);\n"
            f"  consumer group {GROUP} reads demo-orders. Look with:\n"
            "  skiff topics describe    skiff groups describe demo-dashboard",
            flush=True,
        )

    async def close(self) -> None:
        self.stop.set()
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        deadline_s = time.monotonic() + STOP_TIMEOUT_S
        for t in self._threads:
            t.join(max(deadline_s - time.monotonic(), 0.0))

    def _report(self, what: str, error: object) -> None:
        if what not in self._reported:  # once per kind: a stopped agent would repeat it per record
            self._reported.add(what)
            log.warning("demo %s: %s", what, error)

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": 0}

    def _create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(self._config())
        new = [NewTopic(name, PARTITIONS, config=dict(cfg)) for name, cfg in TOPICS.items()]
        for name, future in admin.create_topics(new, request_timeout=10).items():
            try:
                future.result(timeout=15)
            except Exception as e:  # boundary: TOPIC_ALREADY_EXISTS on a second run is fine
                if "already exists" not in str(e).lower():
                    self._report(f"create {name}", e)

    def _produce(self) -> None:
        from confluent_kafka import Producer

        self._create_topics()
        self.topics_ready.set()
        producer = Producer({**self._config(), "linger.ms": 50})
        rng = random.Random(0)
        i = 0
        while not self.stop.wait(1 / self.records_per_second):
            topic, key, value = sample_record(i, rng)
            try:
                producer.produce(topic, key=key, value=value)
                self.produced += 1
            except BufferError as e:  # the local queue is full while the agent is away
                self._report("produce", e)
            producer.poll(0)
            i += 1
        producer.flush(1)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        while not self.topics_ready.wait(POLL_S):
            if self.stop.is_set():
                return
        consumer = Consumer(
            {
                **self._config(),
                "group.id": GROUP,
                "client.id": "demo-dashboard",
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": 1000,
            }
        )
        consumer.subscribe(["demo-orders"])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(POLL_S)
                if msg is None:
                    continue
                if msg.error():
                    self._report("consume", msg.error())
                else:
                    self.consumed += 1
        finally:
            consumer.close()  # leaves the group at once

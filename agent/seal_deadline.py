"""When the produce buffer seals its open file: `flush_interval_ms` is an ack target.

A producer's record is acked once the file holding it is PUT and committed, so a file
sealed exactly `flush_interval_ms` after its first append acks its oldest record
`flush_interval_ms` + (seal -> commit) after the agent received it, and the client saw
more: its own `linger.ms` (librdkafka and the Java client wait 5 ms by default) before the
request left. The buffer instead seals a file *early* by a lead, so that the oldest record
is acked about `flush_interval_ms` after the client produced it:

    seal at  arrival + flush_interval - lead
    lead  =  min(seal_lead_max, post_seal_estimate + waited)

- `post_seal_estimate`: the 95th percentile of the last `window` files' seal -> commit
  times (queueing behind in-flight flushes, the PUT, waiting for the previous file's
  commit, the commit). A high quantile, not the mean, because the bound users care about
  is the p99 of acks, and at low rates every record is its file's oldest; not the
  maximum, because one slow PUT would then shorten every file for the next `window`
  files (p95 of 64 is the fourth largest: three stalls are ignored).
- `waited`: how long before it reached the agent the batch's first record was created
  (the agent's wall clock minus the batch's smallest CreateTime, never negative, rounded
  up by the 1 ms both are truncated to). It is
  the client's timestamp, so it is trusted only up to the cap: a client with a skewed
  clock, or one replaying old timestamps, can make its files seal at most
  `seal_lead_max` early, never later than without the lead.
- Every append may move the deadline earlier (a batch that waited longer in its client
  than the file's first one), never later.

What it costs: nothing in PUTs. A file shorter by the lead would make an agent that seals
by time put `flush_interval / (flush_interval - lead)` times the files (1.04-1.2x with a
250 ms interval), so the buffer never seals a file by time sooner than `flush_interval`
after the previous seal: under steady load files run back to back and each gets the whole
interval (the lead has no room to act there), and a file opened after a pause of at least
the lead is sealed early by all of it (docs/benchmarks.md). `seal_lead_max_ms = 0` turns it
off: a file is then sealed exactly `flush_interval_ms` after its first append.

Pure: times are passed in (loop seconds, wall milliseconds); the buffer owns the timer.
"""

from __future__ import annotations

import bisect
from collections import deque

_QUANTILE = 0.95


class SealDeadline:
    """The lead by which to seal early, learned from the files' seal -> commit times."""

    def __init__(self, *, flush_interval_ms: int, seal_lead_max_ms: int, window: int = 64) -> None:
        if flush_interval_ms <= 0:
            raise ValueError("flush_interval_ms must be positive")
        if seal_lead_max_ms < 0:
            raise ValueError("seal_lead_max_ms must not be negative")
        if window <= 0:
            raise ValueError("window must be positive")
        self.flush_interval_s = flush_interval_ms / 1000.0
        # At most half the interval: a file is never sealed sooner than that, so the lead
        # can at most double the PUTs of an agent that seals by time.
        self.lead_max_s = min(seal_lead_max_ms, flush_interval_ms // 2) / 1000.0
        self._recent: deque[float] = deque(maxlen=window)
        self._sorted: list[float] = []  # the same values, sorted (window is small)
        self.post_seal_estimate_s = 0.0

    def record_post_seal(self, seconds: float) -> None:
        """A file's seal -> commit time (called once per committed file)."""
        seconds = max(seconds, 0.0)
        if len(self._recent) == self._recent.maxlen:
            old = self._recent[0]
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._recent.append(seconds)
        bisect.insort(self._sorted, seconds)
        index = min(len(self._sorted) - 1, int(_QUANTILE * len(self._sorted)))
        self.post_seal_estimate_s = self._sorted[index]

    def lead_s(self, waited_s: float) -> float:
        """How much earlier than `flush_interval` after arrival to seal, for a batch that
        was created `waited_s` before it arrived (by its client's clock)."""
        if waited_s < 0.0:
            waited_s = 0.0
        lead = self.post_seal_estimate_s + waited_s
        return lead if lead < self.lead_max_s else self.lead_max_s

    def deadline_s(self, arrival_s: float, waited_s: float) -> float:
        """Loop time at which a file whose oldest batch arrived at `arrival_s` is sealed."""
        return arrival_s + self.flush_interval_s - self.lead_s(waited_s)


def waited_s(wall_now_ms: int, first_timestamp_ms: int) -> float:
    """Seconds between a batch's smallest timestamp and now, rounded up (both are whole
    milliseconds, truncated: a record stamped 1000 may be 1000.9 ms old at 1001); 0 for a
    batch without a timestamp (-1 in Kafka's format) or one stamped in the future."""
    if first_timestamp_ms <= 0 or first_timestamp_ms > wall_now_ms:
        return 0.0
    return (wall_now_ms - first_timestamp_ms + 1) / 1000.0

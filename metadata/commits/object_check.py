"""The commit's object check: the object a commit names is in the bucket, at its stated size.

Without it, any holder of an agent token could commit a chunk row for an object that does
not exist (or is shorter than stated): the partition would then answer
KAFKA_STORAGE_ERROR at those offsets for good, since offsets are never reassigned. With a
bucket configured (`skiff metadata --bucket`), the file commit (and the compactor's swap)
first sends ONE `head(object_key)` to the bucket through the sync object store
(`fileformat.objectstore`), in the request's own thread, before the commit joins a group
and before any database transaction or partition lock is taken (a slow bucket never holds
a lock). The outcomes:

- `ok`: the object exists and its size equals `FileSpec.size_bytes`: the commit goes on;
- `missing`: no such object -> refused with KAFKA_STORAGE_ERROR (56), nothing stored;
- `size_mismatch`: the object has another size -> refused the same way;
- `unavailable`: the bucket did not answer (`StorageUnavailable`) -> refused the same way
  (the producers retry: 56 is retriable for Kafka clients; the agent's object is then an
  orphan, which garbage collection removes like any uncommitted upload);
- `error`: any other storage error (bad credentials, no such bucket) -> refused the same way.

KAFKA_STORAGE_ERROR rather than INVALID_REQUEST: a legitimate agent PUTs before it commits
and S3, the file store and the memory store read their own writes, so a refusal is either
a forged commit or a storage fault; in both cases Kafka clients may retry (a new file),
and nothing is lost. A commit already recorded (an agent's retry after a lost answer)
whose object has since been removed is answered from what was recorded (see
`metadata.commits.path`), as before.

`metrics_lines()`: `skiff_metadata_commit_object_checks_total{outcome}` and the histogram
`skiff_metadata_commit_object_check_seconds` of the HEAD's duration.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from skiff.fileformat.objectstore import ObjectNotFound, ObjectStore, StorageError, StorageUnavailable
from skiff.metadata.types import FileSpec

OUTCOMES = ("ok", "missing", "size_mismatch", "unavailable", "error")
# Upper bounds (seconds) of the HEAD latency histogram: a local stat is ~10 us, S3 ~5-50 ms.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class ObjectProblem:
    """Why a commit's object does not check out: the outcome and a one-line message."""

    outcome: str
    message: str


class ObjectCheck:
    """One HEAD per check; counts outcomes and latencies for /metrics (thread-safe)."""

    def __init__(self, store: ObjectStore, *, clock_s: Callable[[], float] = time.perf_counter) -> None:
        self.store = store
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self._bucket_counts = [0] * len(BUCKETS_S)
        self._sum_s = 0.0
        self._count = 0

    def problem(self, file: FileSpec) -> ObjectProblem | None:
        """None if `file.object_key` exists with `file.size_bytes` bytes, else what is wrong."""
        key = file.object_key
        t0 = self._clock_s()
        found: ObjectProblem | None = None
        try:
            size = self.store.head(key).size
            if size != file.size_bytes:
                found = ObjectProblem(
                    "size_mismatch",
                    f"commit of {key!r}: the object holds {size} bytes, the commit states {file.size_bytes}",
                )
        except ObjectNotFound:
            found = ObjectProblem("missing", f"commit of {key!r}: no such object in the bucket")
        except StorageUnavailable as e:
            found = ObjectProblem("unavailable", f"commit of {key!r}: cannot check the object: {e}")
        except StorageError as e:
            found = ObjectProblem("error", f"commit of {key!r}: cannot check the object: {e}")
        self._record(found.outcome if found else "ok", self._clock_s() - t0)
        return found

    def _record(self, outcome: str, seconds: float) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            self._sum_s += seconds
            self._count += 1
            for i, bound in enumerate(BUCKETS_S):
                if seconds <= bound:
                    self._bucket_counts[i] += 1
                    break

    def mean_seconds(self) -> float:
        """The mean HEAD duration so far (0 before the first check)."""
        with self._lock:
            return self._sum_s / self._count if self._count else 0.0

    def metrics_lines(self) -> list[str]:
        with self._lock:
            counts = list(self._bucket_counts)
            total, sum_s = self._count, self._sum_s
            outcomes = dict(self.outcomes)
        lines = [
            "# HELP skiff_metadata_commit_object_checks_total HEADs of committed objects, by outcome.",
            "# TYPE skiff_metadata_commit_object_checks_total counter",
        ]
        lines += [
            f'skiff_metadata_commit_object_checks_total{{outcome="{o}"}} {outcomes.get(o, 0)}'
            for o in OUTCOMES
        ]
        lines += [
            "# HELP skiff_metadata_commit_object_check_seconds Duration of the HEAD of a committed object.",
            "# TYPE skiff_metadata_commit_object_check_seconds histogram",
        ]
        running = 0
        for bound, n in zip(BUCKETS_S, counts, strict=True):
            running += n
            lines.append(f'skiff_metadata_commit_object_check_seconds_bucket{{le="{bound}"}} {running}')
        lines.append(f'skiff_metadata_commit_object_check_seconds_bucket{{le="+Inf"}} {total}')
        lines.append(f"skiff_metadata_commit_object_check_seconds_sum {sum_s:.6f}")
        lines.append(f"skiff_metadata_commit_object_check_seconds_count {total}")
        return lines

"""Benchmark: purgatory enqueue rate, timing wheels vs asyncio's heap timer.

After Kafka's purgatory benchmark (`TestPurgatoryPerformance`, KAFKA-1430, and Yasuhiro
Matsuda's "Apache Kafka, Purgatory, and Hierarchical Timing Wheels"):

- Requests arrive as a Poisson process at a target rate (exponential inter-arrival
  times); each is a delayed operation with a 200 ms timeout watching the same 3 keys
  (out of 100, drawn once per run, as in Kafka's tool), added with
  `try_complete_else_watch`.
- Each request's completion time is drawn from a log-normal distribution given by its
  50th and 75th percentiles: mu = ln(p50), sigma = (ln(p75) - ln(p50)) / 0.674490
  (z of the 75th percentile of N(0, 1)). Low-timeout case: p50 20 ms, p75 60 ms (~8%
  of the requests time out); high-timeout case: p50 200 ms, p75 400 ms (~50% time out).
  Like Kafka's tool: 2^16 pre-drawn samples of each, latencies truncated to whole ms.
- A request whose completion time is before its timeout is handed to a separate
  *completion thread* (Kafka: a DelayQueue and a thread calling `forceComplete()`). The
  purgatory is loop-confined (see `agent/purgatory.py`), so the thread passes the due
  operations back to the event loop in one `loop.call_soon_threadsafe` per wake-up
  (every ~0.5 ms), where they are force-completed. The others time out.
- Designs: (a) `wheel`: `agent.purgatory.DelayedOperationPurgatory` (hierarchical
  timing wheels driven by `AsyncTimerDriver`); (b) `heap`: the same watcher lists and
  purge, but the timeout is `loop.call_at` per operation (asyncio's own heap timer) and
  completing an operation cancels its handle (asyncio drops cancelled handles lazily).
- Reported per run: the target rate (requests / scheduled duration), the achieved enqueue
  rate (requests / time until the last one was enqueued; below the target when the loop
  cannot keep up), the process CPU time (both threads), the peak RSS (ru_maxrss; every run
  is a fresh process), the most watcher-list entries seen, and the lag of completions
  (done - due) and of expirations (expired - deadline). A run *sustains* its target if it
  achieves >= 97% of it and both lags stay <= 50 ms at p99; the sweep for a design stops
  after its second run that does not.

    python bench/purgatory.py                          # 1,000,000 requests per run
    python bench/purgatory.py --requests 200000 --rates 50000,100000 --cases high

Each run is a child process (`--cell`), so memory and CPU are per run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Hashable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory  # noqa: E402
from skiff.agent.timing_wheel import monotonic_ms  # noqa: E402

CASES = {"low": (20.0, 60.0), "high": (200.0, 400.0)}  # (p50, p75) of completion ms
Z75 = 0.674490  # 75th percentile of N(0, 1), as in Kafka's tool
POOL = 1 << 16
LAG_MAX = 10_000  # lag histogram: 1 ms buckets, the last one is ">= 10 s"
SUSTAIN_RATIO = 0.97
SUSTAIN_LAG_MS = 50


class Stats:
    """Counters shared by the operations of one run (one process, one run)."""

    __slots__ = ("n", "done", "finished", "completion_lag", "expiry_lag")

    def __init__(self) -> None:
        self.n = 0
        self.done = 0
        self.finished: asyncio.Future[None] | None = None
        self.completion_lag = [0] * (LAG_MAX + 1)
        self.expiry_lag = [0] * (LAG_MAX + 1)


S = Stats()


# -- (a) the timing-wheel purgatory ---------------------------------------------------


class WheelOp(DelayedOperation):
    __slots__ = ("completes_at",)

    def __init__(self, delay_ms: int, completes_at: int) -> None:
        DelayedOperation.__init__(self, delay_ms)
        self.completes_at = completes_at

    def try_complete(self) -> bool:
        return monotonic_ms() >= self.completes_at and self.force_complete()

    def on_complete(self) -> None:
        S.done += 1
        if S.done == S.n and S.finished is not None:
            S.finished.set_result(None)

    def on_expiration(self) -> None:
        lag = monotonic_ms() - self.expiration_ms
        S.expiry_lag[lag if lag < LAG_MAX else LAG_MAX] += 1


# -- (b) baseline: asyncio's heap timer, one TimerHandle per operation --------------------


class HeapOp:
    __slots__ = ("delay_ms", "completes_at", "handle", "deadline", "_completed", "_purgatory")

    def __init__(self, delay_ms: int, completes_at: int) -> None:
        self.delay_ms = delay_ms
        self.completes_at = completes_at
        self.handle: asyncio.TimerHandle | None = None
        self.deadline = 0.0
        self._completed = False
        self._purgatory: HeapPurgatory | None = None

    def try_complete(self) -> bool:
        return monotonic_ms() >= self.completes_at and self.force_complete()

    def force_complete(self) -> bool:
        if self._completed:
            return False
        self._completed = True
        handle = self.handle
        if handle is not None:
            handle.cancel()
            self.handle = None
            self._purgatory.delayed -= 1  # type: ignore[union-attr]
        S.done += 1
        if S.done == S.n and S.finished is not None:
            S.finished.set_result(None)
        return True

    def run(self) -> None:  # the TimerHandle's callback: the timeout
        self.handle = None
        self._purgatory.delayed -= 1  # type: ignore[union-attr]
        if self.force_complete():
            lag = int((time.monotonic() - self.deadline) * 1000)
            S.expiry_lag[lag if lag < LAG_MAX else LAG_MAX] += 1


class HeapPurgatory:
    """Same watcher lists, estimate and purge as `DelayedOperationPurgatory`; the timer is
    `loop.call_at`. The purge check runs every millisecond (the wheel checks it whenever
    a bucket is due, which under load is about every millisecond too)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, purge_interval: int = 1000) -> None:
        self._loop = loop
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[HeapOp]] = {}
        self._estimated_total = 0
        self.delayed = 0
        self._reaper: asyncio.TimerHandle | None = None

    @property
    def watched(self) -> int:
        return sum(map(len, self._watchers.values()))

    def try_complete_else_watch(self, op: HeapOp, keys: tuple[Hashable, ...]) -> bool:
        if op.try_complete():
            return True
        watchers = self._watchers
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
        self._estimated_total += 1
        loop = self._loop
        op.deadline = deadline = loop.time() + op.delay_ms / 1000
        op._purgatory = self
        op.handle = loop.call_at(deadline, op.run)
        self.delayed += 1
        return False

    def _reap(self) -> None:
        delayed = self.delayed
        if self._estimated_total - delayed > self.purge_interval:
            self._estimated_total = delayed
            for key, ops in list(self._watchers.items()):
                live = [op for op in ops if not op._completed]
                if live:
                    ops[:] = live
                else:
                    del self._watchers[key]
        self._reaper = self._loop.call_later(0.001, self._reap)

    def start(self) -> None:
        self._reaper = self._loop.call_later(0.001, self._reap)

    async def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()


# -- the completion thread ----------------------------------------------------------------


class Completer(threading.Thread):
    """Completes operations at their `completes_at` from its own thread, through the loop:
    due operations are grouped per wake-up into one `call_soon_threadsafe`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name="completion", daemon=True)
        self.loop = loop
        self.inbox: deque[WheelOp | HeapOp] = deque()
        self.stopped = False

    def run(self) -> None:
        inbox = self.inbox
        popleft = inbox.popleft
        slots: dict[int, list[WheelOp | HeapOp]] = {}
        cursor = monotonic_ms()
        call = self.loop.call_soon_threadsafe
        while not self.stopped:
            batch: list[WheelOp | HeapOp] = []
            while inbox:
                op = popleft()
                at = op.completes_at
                if at < cursor:
                    batch.append(op)
                else:
                    lst = slots.get(at)
                    if lst is None:
                        slots[at] = [op]
                    else:
                        lst.append(op)
            now = monotonic_ms()
            while cursor <= now:
                lst = slots.pop(cursor, None)
                if lst is not None:
                    batch += lst
                cursor += 1
            if batch:
                call(complete_batch, batch)
            time.sleep(0.0005)


def complete_batch(batch: list[WheelOp | HeapOp]) -> None:
    now = monotonic_ms()
    hist = S.completion_lag
    for op in batch:
        if op.force_complete():
            lag = now - op.completes_at
            hist[lag if lag < LAG_MAX else LAG_MAX] += 1


# -- one run ------------------------------------------------------------------------------


def percentile(hist: list[int], q: float) -> int | None:
    total = sum(hist)
    if not total:
        return None
    rank = math.ceil(q * total)
    acc = 0
    for ms, count in enumerate(hist):
        acc += count
        if acc >= rank:
            return ms
    return LAG_MAX


def max_of(hist: list[int]) -> int | None:
    for ms in range(len(hist) - 1, -1, -1):
        if hist[ms]:
            return ms
    return None


def rss_now_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


async def run_cell_async(args: argparse.Namespace, design: str, case: str, rate: float) -> dict:
    rng = random.Random(args.seed)
    p50, p75 = CASES[case]
    mu = math.log(p50)
    sigma = (math.log(p75) - mu) / Z75
    intervals = itertools.cycle([rng.expovariate(rate) for _ in range(POOL)])
    latencies = itertools.cycle([int(rng.lognormvariate(mu, sigma)) for _ in range(POOL + 1)])
    keys = tuple(f"fakeKey{rng.randrange(args.key_space)}" for _ in range(args.keys))
    n = args.requests
    timeout = args.timeout
    loop = asyncio.get_running_loop()
    S.n = n
    S.finished = loop.create_future()

    purgatory: DelayedOperationPurgatory[WheelOp] | HeapPurgatory
    if design == "wheel":
        purgatory = DelayedOperationPurgatory("bench", purge_interval=args.purge_interval)
        make_op: type[WheelOp] | type[HeapOp] = WheelOp
    else:
        purgatory = HeapPurgatory(loop, purge_interval=args.purge_interval)
        make_op = HeapOp
    purgatory.start()
    completer = Completer(loop)
    completer.start()

    peak = {"watched": 0, "delayed": 0}

    def sample() -> None:
        peak["watched"] = max(peak["watched"], purgatory.watched)
        peak["delayed"] = max(peak["delayed"], purgatory.delayed)
        sampler[0] = loop.call_later(0.1, sample)

    sampler = [loop.call_later(0.1, sample)]

    gc.collect()
    rss_start = rss_now_kib()
    watch = purgatory.try_complete_else_watch
    hand_over = completer.inbox.append
    cpu0 = time.process_time()
    t0 = time.monotonic()
    arrival = last_arrival = t0
    i = 0
    while i < n:
        now = time.monotonic()
        now_ms = monotonic_ms()
        k = 0
        while arrival <= now and k < 1000 and i < n:
            latency = next(latencies)
            op = make_op(timeout, now_ms + latency)
            if latency < timeout:
                hand_over(op)
            watch(op, keys)  # type: ignore[arg-type]
            last_arrival = arrival
            arrival += next(intervals)
            i += 1
            k += 1
        delay = arrival - time.monotonic()
        await asyncio.sleep(delay if delay > 0 else 0)
    t_enqueued = time.monotonic()
    await S.finished
    t_done = time.monotonic()
    cpu = time.process_time() - cpu0
    completer.stopped = True
    sampler[0].cancel()
    await purgatory.shutdown()
    completer.join()
    sample()
    sampler[0].cancel()
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scheduled = last_arrival - t0
    return {
        "design": design,
        "case": case,
        "rate": rate,
        "requests": n,
        "target": n / scheduled,
        "achieved": n / (t_enqueued - t0),
        "elapsed_s": t_done - t0,
        "cpu_s": cpu,
        "rss_start_mib": rss_start / 1024,
        "maxrss_mib": maxrss_kib / 1024,
        "peak_watched": peak["watched"],
        "peak_delayed": peak["delayed"],
        "completed": sum(S.completion_lag),
        "expired": sum(S.expiry_lag),
        "completion_lag_p50": percentile(S.completion_lag, 0.5),
        "completion_lag_p99": percentile(S.completion_lag, 0.99),
        "completion_lag_max": max_of(S.completion_lag),
        "expiry_lag_p50": percentile(S.expiry_lag, 0.5),
        "expiry_lag_p99": percentile(S.expiry_lag, 0.99),
        "expiry_lag_max": max_of(S.expiry_lag),
    }


def sustained(r: dict) -> bool:
    lags = [r["completion_lag_p99"], r["expiry_lag_p99"]]
    return r["achieved"] >= SUSTAIN_RATIO * r["target"] and all(
        lag is None or lag <= SUSTAIN_LAG_MS for lag in lags
    )


# -- the sweep ----------------------------------------------------------------------------


def fmt_lag(p99: int | None, mx: int | None) -> str:
    return "-" if p99 is None else f"{p99} / {mx}"


def table(results: list[dict]) -> str:
    head = (
        "| case | design | target/s | achieved/s | % | sustained | CPU s | peak RSS MiB (start) "
        "| peak watched | completion lag p99 / max ms | expiry lag p99 / max ms |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in results:
        lines.append(
            f"| {r['case']} | {r['design']} | {r['target']:,.0f} | {r['achieved']:,.0f} "
            f"| {100 * r['achieved'] / r['target']:.0f} | {'yes' if sustained(r) else 'no'} "
            f"| {r['cpu_s']:.1f} "
            f"| {r['maxrss_mib']:.0f} ({r['rss_start_mib']:.0f}) | {r['peak_watched']:,} "
            f"| {fmt_lag(r['completion_lag_p99'], r['completion_lag_max'])} "
            f"| {fmt_lag(r['expiry_lag_p99'], r['expiry_lag_max'])} |"
        )
    return "\n".join(lines)


def summary(results: list[dict]) -> str:
    """Per case and design: the highest target sustained with every lower target sustained
    too (near the limit, verdicts can flip from run to run), the first target that was not,
    and the highest enqueue rate achieved at all."""
    lines = [
        "",
        "| case | design | sustained up to (target/s) | first not sustained (target/s) | highest achieved/s |",
        "|---|---|---|---|---|",
    ]
    for case in dict.fromkeys(r["case"] for r in results):
        for design in dict.fromkeys(r["design"] for r in results):
            rs = sorted(
                (r for r in results if r["case"] == case and r["design"] == design), key=lambda r: r["target"]
            )
            if not rs:
                continue
            up_to = "none"
            first_miss = "-"
            for r in rs:
                if not sustained(r):
                    first_miss = f"{r['target']:,.0f}"
                    break
                up_to = f"{r['target']:,.0f}"
            best = max(r["achieved"] for r in rs)
            lines.append(f"| {case} | {design} | {up_to} | {first_miss} | {best:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000, help="requests per run")
    ap.add_argument(
        "--rates",
        default="25000,50000,75000,100000,125000,150000,175000,200000,250000,300000",
        help="target rates (req/s)",
    )
    ap.add_argument("--cases", default="low,high")
    ap.add_argument("--designs", default="wheel,heap")
    ap.add_argument("--timeout", type=int, default=200, help="operation timeout, ms")
    ap.add_argument("--keys", type=int, default=3, help="keys watched per request")
    ap.add_argument("--key-space", type=int, default=100)
    ap.add_argument("--purge-interval", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1430)
    ap.add_argument("--no-stop", action="store_true", help="run every rate even past saturation")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--report", help="print the tables of a --json file and exit")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # design,case,rate: one run, JSON out
    args = ap.parse_args()

    if args.cell:
        design, case, rate = args.cell.split(",")
        print(json.dumps(asyncio.run(run_cell_async(args, design, case, float(rate)))))
        return
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        print(table(saved))
        print(summary(saved))
        return

    print(
        f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{args.requests:,} requests per run, timeout {args.timeout} ms",
        file=sys.stderr,
    )
    results: list[dict] = []
    passthrough = [
        f"--requests={args.requests}",
        f"--timeout={args.timeout}",
        f"--keys={args.keys}",
        f"--key-space={args.key_space}",
        f"--purge-interval={args.purge_interval}",
        f"--seed={args.seed}",
    ]
    for case in args.cases.split(","):
        for design in args.designs.split(","):
            misses = 0
            for rate in args.rates.split(","):
                out = subprocess.run(
                    [
                        sys.executable,
                        os.path.abspath(__file__),
                        f"--cell={design},{case},{rate}",
                        *passthrough,
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                r = json.loads(out.strip().splitlines()[-1])
                results.append(r)
                print(
                    f"{case:4} {design:5} target {r['target']:9,.0f} achieved {r['achieved']:9,.0f} "
                    f"cpu {r['cpu_s']:5.1f}s rss {r['maxrss_mib']:4.0f} MiB "
                    f"lag p99 {r['completion_lag_p99']}/{r['expiry_lag_p99']} ms "
                    f"{'ok' if sustained(r) else 'SATURATED'}",
                    file=sys.stderr,
                    flush=True,
                )
                misses += not sustained(r)
                if misses >= 2 and not args.no_stop:
                    break
    print(table(results))
    print(summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

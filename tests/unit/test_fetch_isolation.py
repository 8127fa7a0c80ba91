"""`agent.handlers.fetch.trim_below`: read_committed answers end before the first batch at
or above the last stable offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from skiff.agent.handlers.fetch import trim_below
from skiff.fileformat.batch_header import iter_batches
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record


def _batches(sizes: list[int]) -> tuple[bytes, list[int]]:
    out = b""
    bases = []
    base = 0
    for n in sizes:
        bases.append(base)
        out += build_batch([Record(i, 1, b"k", b"v" * i, ()) for i in range(n)], base_offset=base)
        base += n
    return out, bases


@given(st.lists(st.integers(1, 4), max_size=6), st.integers(0, 30))
def test_keeps_exactly_the_batches_below_the_limit(sizes: list[int], limit: int) -> None:
    data, bases = _batches(sizes)
    kept = trim_below(data, limit)
    assert [h.base_offset for _, h in iter_batches(kept)] == [b for b in bases if b < limit]
    assert data.startswith(kept)


def test_edges() -> None:
    data, _ = _batches([2, 3])
    assert trim_below(data, 0) == b""
    assert trim_below(data, 2) == data[: len(data) - len(_batches([3])[0])]
    assert trim_below(data, 5) is data
    assert trim_below(b"", 3) == b""

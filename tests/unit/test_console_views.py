"""The console's pure side: SVG charts, formatting, view models, the session helpers."""

from __future__ import annotations

import base64
import json
import struct
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st
from skiff.fileformat.objectstore.pricing import Prices
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.metadata.server.console.browser import decode_selection
from skiff.metadata.server.console.queries import FileBucket
from skiff.metadata.server.console.session import decode_token, encode_token, safe_next
from skiff.metadata.server.console.views import cost, data, formats
from skiff.metadata.server.console.views.charts import MAX_POINTS, Point, bar_chart, nice_ceiling
from skiff.metadata.types import GroupOffset, StoredGroup, StoreUsage
from skiff.metadata.usage import UsagePoint


def test_a_chart_is_well_formed_svg_with_its_text_escaped() -> None:
    svg = bar_chart([Point("<b>", 3.0), Point("12:01", 7.5)], title='a "title" & <script>', unit="B/s")
    root = ET.fromstring(svg)  # parses: every piece of text was escaped
    ns = "{http://www.w3.org/2000/svg}"
    bars = root.findall(f"{ns}rect")
    assert len(bars) == 2
    heights = [float(b.get("height", "0")) for b in bars]
    assert heights[1] > heights[0] > 0
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert [t.text for t in bars[0].findall(f"{ns}title")] == ["<b>: 3 B/s"]


def test_an_empty_chart_says_so_and_long_series_are_cut() -> None:
    assert "no data in this window" in bar_chart([Point("x", 0.0)], title="t", unit="u")
    svg = bar_chart([Point(str(i), 1.0) for i in range(MAX_POINTS + 50)], title="t", unit="u")
    assert svg.count('<rect class="bar"') == MAX_POINTS


@given(st.floats(min_value=1e-6, max_value=1e15, allow_nan=False))
def test_nice_ceiling_bounds_the_value_from_above_within_a_factor_of_two_and_a_half(x: float) -> None:
    top = nice_ceiling(x)
    assert x <= top * (1 + 1e-12) and top <= x * 2.5 * (1 + 1e-12)


def test_formats() -> None:
    assert formats.fmt_bytes(1536) == "1.5 KiB" and formats.fmt_bytes(12) == "12 B"
    assert formats.fmt_time(0) == "1970-01-01 00:00:00" and formats.fmt_time(-1) == "-"
    assert formats.fmt_age(850) == "850 ms" and formats.fmt_age(90_000) == "90.0 s"
    assert formats.parse_time_ms("1970-01-01T00:00:01Z") == 1000
    assert formats.parse_time_ms("1970-01-01T00:00:02") == 2000  # no zone: UTC
    assert formats.parse_time_ms("1234") == 1234
    with pytest.raises(ValueError):
        formats.parse_time_ms("yesterday")


def test_record_bytes_as_text_hex_and_json() -> None:
    assert formats.show_bytes(None, "text") == ("null", "")
    assert formats.show_bytes(b"\xffab", "text") == ("\ufffdab", "")
    assert formats.show_bytes(b"\x00\x01\x02\x03\x04", "hex") == ("00010203 04", "")
    assert formats.show_bytes(b'{"a":1}', "json") == ('{\n  "a": 1\n}', "")
    assert formats.show_bytes(b"plain", "json") == ("plain", "not JSON: shown as text")
    big = b"x" * (formats.MAX_SHOWN_BYTES + 10)
    shown, note = formats.show_bytes(big, "text")
    assert len(shown) == formats.MAX_SHOWN_BYTES and note == "10 more bytes not shown"


def test_throughput_from_the_committed_files() -> None:
    series = [FileBucket(60_000 * i, level0_files=2, level0_bytes=600, compacted_files=1) for i in range(60)]
    t = data.throughput(series, 60_000)
    assert t.window_ms == 3_600_000 and t.files == 120 and t.level0_bytes == 36_000
    assert t.bytes_per_s == pytest.approx(10.0) and t.files_per_s == pytest.approx(120 / 3600)


def test_the_bill_from_reported_usage_by_role() -> None:
    """Rates and cost per role over the window, totals over roles, storage at the price per
    GiB-month, and the per-minute charts summing the roles of each minute."""
    prices = Prices(write_per_1000_usd=0.005, read_per_1000_usd=0.0004, storage_gb_month_usd=0.023)
    totals = {
        "agent": StoreUsage(puts=3600, gets=360, lists=0, bytes_out=10),
        "reader": StoreUsage(gets=7200, heads=0, bytes_in=99),
    }
    series = [
        UsagePoint(0, "agent", StoreUsage(puts=60, gets=6)),
        UsagePoint(0, "reader", StoreUsage(gets=120)),
        UsagePoint(60_000, "agent", StoreUsage(puts=30)),
    ]
    bill = cost.bill_view(totals, series, 60_000, 3_600_000, 2 * 2**30, prices)
    rows = {r.role: r for r in bill.roles}
    assert list(rows) == ["agent", "compactor", "reader"]
    assert rows["agent"].puts_per_s == pytest.approx(1.0) and rows["agent"].gets_per_s == pytest.approx(0.1)
    assert rows["agent"].usd_per_hour == pytest.approx(3600 * 0.005 / 1000 + 360 * 0.0004 / 1000)
    assert rows["compactor"].usd_per_hour == 0 and rows["reader"].gets_per_s == pytest.approx(2.0)
    assert bill.total.usage.gets == 7560 and bill.reported
    assert bill.storage_usd_per_month == pytest.approx(0.046)
    assert bill.usd_per_month == pytest.approx(bill.total.usd_per_hour * 730 + 0.046)
    assert "<title>00:00: 2.1 GET/s</title>" in bill.gets_chart  # 126 GETs in the first minute
    first_minute_usd = (60 * 0.005 + 126 * 0.0004) / 1000
    assert f"<title>00:00: {first_minute_usd * 60:.3g} USD/h</title>" in bill.cost_chart
    assert not cost.bill_view({}, [], 60_000, 3_600_000, 0, prices).reported


def _assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)  # user data: null


def test_group_state_members_and_lag() -> None:
    state = {
        "generation": 4,
        "protocol": "range",
        "assigned": True,
        "members": [
            {
                "id": "m-1",
                "client_id": "c",
                "client_host": "/1.2.3.4",
                "assignment": base64.b64encode(_assignment({"t": [1, 0]})).decode(),
            }
        ],
    }
    g = data.group_state(StoredGroup("g", "agent-1", True, json.dumps(state)))
    assert (g.state, g.generation, g.protocol) == ("Stable", 4, "range")
    assert g.members[0].assignment == [("t", 0), ("t", 1)]
    assert data.group_state(StoredGroup("g", None, False, json.dumps(state))).state == "Empty"
    assert data.assignment_partitions(b"\x00") == []
    rows = data.offset_rows(
        [GroupOffset("t", 1, 7), GroupOffset("t", 0, 3), GroupOffset("gone", 0, 1)],
        {("t", 0): (0, 10), ("t", 1): (5, 7)},
        g.members,
    )
    assert [(r.topic, r.partition, r.lag, r.member_id) for r in rows] == [
        ("gone", 0, 0, None),  # a deleted topic: no log end, no lag
        ("t", 0, 7, "m-1"),
        ("t", 1, 0, "m-1"),
    ]
    assert data.group_row(g, rows).lag == 7


def test_paging_bounds() -> None:
    items, paging = data.page_of(list(range(250)), 240, 100)
    assert items == list(range(240, 250)) and paging.prev_offset == 140 and paging.next_offset is None
    items, paging = data.page_of(list(range(250)), -5, 100)
    assert items == list(range(100)) and paging.prev_offset is None and paging.next_offset == 100


def test_decoding_skips_earlier_offsets_and_control_batches_and_finds_a_time() -> None:
    records = [Record(i, 1000 + 10 * i, f"k{i}".encode(), f"v{i}".encode(), ()) for i in range(6)]
    data_batch = build_batch(records, base_offset=100)
    marker = build_batch(
        [Record(0, 2000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())],
        base_offset=106,
        is_control=True,
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
    )
    both = data_batch + marker
    assert [r.offset for r in decode_selection(both, 102, 10)] == [102, 103, 104, 105]
    assert [r.offset for r in decode_selection(both, 100, 2)] == [100, 101]
    assert [r.offset for r in decode_selection(both, 100, 10, not_before_ms=1025)] == [103, 104, 105]


def test_session_helpers() -> None:
    token = 'tok;en,"with=odd' + "x" * 10
    assert decode_token(encode_token(token)) == token and ";" not in encode_token(token)
    assert decode_token("%%%") is None
    assert safe_next("/console/topics?offset=1") == "/console/topics?offset=1"
    for bad in ("//evil.example", "https://evil.example/console", "/docs", "/console\\evil", None):
        assert safe_next(bad) == "/console"

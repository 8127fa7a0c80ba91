"""How the console shows numbers, times and record bytes (pure functions).

Record keys and values are shown in one of three forms (`RECORD_FORMATS`): `text` (UTF-8,
undecodable bytes replaced), `hex` (two digits a byte, grouped by four bytes) and `json`
(pretty-printed when the bytes parse as JSON, else the text form with a note). At most
`MAX_SHOWN_BYTES` of one key or value are shown; the rest is counted, not printed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

RECORD_FORMATS = ("text", "hex", "json")
MAX_SHOWN_BYTES = 4096


def fmt_bytes(n: int | float) -> str:
    """1,536 -> '1.5 KiB' (binary units, three significant digits)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"  # pragma: no cover (the loop returns)


def fmt_count(n: int) -> str:
    return f"{n:,}"


def fmt_time(ms: int | None) -> str:
    """Milliseconds since the epoch as UTC, to the second ('-' for none or negative)."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_clock(ms: int) -> str:
    """The time of day (UTC, to the minute): a chart's x labels."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def fmt_age(ms: int | None) -> str:
    """A duration in ms as '850 ms', '12.5 s', '3.0 min', '2.0 h' ('-' for none)."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def parse_time_ms(text: str) -> int:
    """An ISO 8601 time ('2026-11-24T10:00:00Z'; UTC when no zone is given) or a number of
    ms since the epoch, as ms; ValueError if neither."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    when = datetime.fromisoformat(t.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def show_bytes(data: bytes | None, form: str) -> tuple[str, str]:
    """(what to show, a note) for a key or value in `form` (see the module docstring)."""
    if data is None:
        return "null", ""
    shown = data[:MAX_SHOWN_BYTES]
    note = f"{len(data) - len(shown):,} more bytes not shown" if len(shown) < len(data) else ""
    if form == "hex":
        hexed = shown.hex()
        return " ".join(hexed[i : i + 8] for i in range(0, len(hexed), 8)), note
    text = shown.decode("utf-8", errors="replace")
    if form == "json":
        try:
            return json.dumps(json.loads(data), indent=2, ensure_ascii=False)[: MAX_SHOWN_BYTES * 2], ""
        except ValueError:
            return text, "not JSON: shown as text"
    return text, note


def fmt_usd(usd: float) -> str:
    """A cost in US dollars: '$0', '$0.000005', '$0.0123', '$4.56', '$1,234'."""
    if usd >= 1000:
        return f"${usd:,.0f}"
    if usd >= 1:
        return f"${usd:.2f}"
    if usd >= 0.01:
        return f"${usd:.4f}"
    if usd <= 0:
        return "$0"
    return "$" + f"{usd:.8f}".rstrip("0")  # small costs keep their first digits

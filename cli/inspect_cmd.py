"""`skiff inspect PATH_OR_URL`: print a segment file's chunks, optionally verifying every batch.

Reads the footer with ranged reads (two small GETs for a remote object), so inspecting a
large file is cheap; `--verify` walks the whole file from byte 0 with the streaming
reader, checks every chunk header and every batch's CRC-32C, decodes every record and
compares the counts with the footer. Errors name the file and the byte position.

Agent files do not know their offsets (metadata assigns them at commit) and name topics
by id. With `--metadata URL` (the metadata service, or its database URL) the chunk table
is asked which rows point into this object (`file_chunks`), and each footer chunk is shown
with its topic name and the offsets metadata assigned to it (several runs when a retry's
duplicate batches were skipped; none when the file was never committed or its chunks were
compacted away). The object key defaults to the target's path from its last `segments/`
directory on (where agents write); `--key` names it explicitly.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from rich.table import Table
from skiff.cli.admin_common import stdout_console
from skiff.cli.errors import CommandError
from skiff.fileformat.batch_header import RecordBatchError, iter_batches
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.fileformat.record_decode import decode_records, validate_batch
from skiff.fileformat.segment import FooterEntry, SegmentFormatError, iter_chunks_stream, read_footer
from skiff.metadata.types import FileChunk, FileChunks


@dataclass
class _Source:
    """A segment file on local disk or behind an object store URL."""

    name: str
    store: ObjectStore | None
    key: str
    path: Path | None

    def size(self) -> int:
        if self.path is not None:
            return self.path.stat().st_size
        assert self.store is not None
        return self.store.size(self.key)

    def read_range(self, start: int, length: int) -> bytes:
        if self.path is not None:
            with self.path.open("rb") as f:
                f.seek(start)
                return f.read(length)
        assert self.store is not None
        return self.store.get_range(self.key, start, length)

    def stream(self) -> Iterator[bytes]:
        if self.path is not None:
            with self.path.open("rb") as f:
                while piece := f.read(1 << 20):
                    yield piece
            return
        assert self.store is not None
        with self.store.stream_get(self.key) as body:
            yield from body

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _open_source(target: str) -> _Source:
    parsed = urlparse(target)
    if parsed.scheme in ("", "file") and not target.startswith("file://"):
        return _Source(target, None, "", Path(target))
    if parsed.scheme == "file":
        return _Source(target, None, "", Path(parsed.path))
    if parsed.scheme in ("s3", "memory"):
        path = parsed.path.lstrip("/")
        if not path:
            raise CommandError(f"{target}: the URL names a bucket, not an object")
        store = open_store(f"{parsed.scheme}://{parsed.netloc}")
        return _Source(target, store, path, None)
    raise CommandError(f"{target}: unsupported location (use a path, file://, s3:// or memory://)")


def default_object_key(target: str) -> str:
    """The object key of a target: its path from the last `segments/` directory on."""
    path = urlparse(target).path if "://" in target else target
    parts = Path(path).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "segments":
            return "/".join(parts[i:])
    return "/".join(p for p in parts if p not in ("/", ""))


def _ask_metadata(metadata_url: str, object_key: str) -> FileChunks:
    from skiff.metadata.wire.connect import open_sync_metadata_client

    client = open_sync_metadata_client(metadata_url)
    try:
        chunks: FileChunks = client.file_chunks(object_key)
        return chunks
    finally:
        client.close()


def _rows_of(entry: FooterEntry, known: FileChunks | None) -> list[FileChunk]:
    """The chunk rows metadata holds inside one footer chunk's bytes."""
    if known is None:
        return []
    end = entry.data_position + entry.byte_length
    return [
        c
        for c in known.chunks
        if c.topic_id == entry.topic_id
        and c.partition == entry.partition
        and entry.data_position <= c.location.byte_position < end
    ]


def _offsets_text(entry: FooterEntry, rows: list[FileChunk] | None) -> str:
    if entry.base_offset >= 0:
        return f"{entry.base_offset}..{entry.last_offset}"
    if rows is None:
        return "(assigned by metadata)"
    if not rows:
        return "(none in metadata)"
    return ", ".join(f"{r.location.base_offset}..{r.location.last_offset}" for r in rows)


def _ts(ms: int) -> str:
    if ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def _verify(source: _Source, entries: list[FooterEntry]) -> list[str]:
    """Walk the file from byte 0; returns a list of problems (empty when all is well)."""
    problems: list[str] = []
    walked = 0
    for (header, data), entry in zip(iter_chunks_stream(source.stream(), source.name), entries, strict=False):
        walked += 1
        if (header.topic_id, header.partition, header.data_position) != (
            entry.topic_id,
            entry.partition,
            entry.data_position,
        ):
            problems.append(f"chunk at byte {header.header_position} disagrees with the footer")
        batches = records = 0
        for pos, h in iter_batches(data):
            try:
                validate_batch(data, pos)
                records += len(decode_records(data, pos, header=h))
            except RecordBatchError as exc:
                problems.append(f"{source.name}: at byte {header.data_position + pos}: {exc}")
            batches += 1
        if batches != header.batch_count or records != header.record_count:
            problems.append(
                f"chunk at byte {header.header_position}: header says {header.batch_count} batches /"
                f" {header.record_count} records, found {batches} / {records}"
            )
    if walked != len(entries):
        problems.append(f"stream walk found {walked} chunks, the footer lists {len(entries)}")
    return problems


def run_inspect(
    target: str,
    *,
    verify: bool = False,
    as_json: bool = False,
    metadata_url: str | None = None,
    object_key: str | None = None,
) -> int:
    source = _open_source(target)
    try:
        try:
            header, entries = read_footer(source, source.name)
        except SegmentFormatError as exc:
            raise CommandError(str(exc)) from exc
        known: FileChunks | None = None
        if metadata_url:
            known = _ask_metadata(metadata_url, object_key or default_object_key(target))
        names = {c.topic_id: c.topic_name for c in known.chunks} if known else {}
        rows = [_rows_of(e, known) if known else None for e in entries]
        problems: list[str] = []
        if verify:
            try:
                problems = _verify(source, entries)
            except (SegmentFormatError, RecordBatchError) as exc:
                problems = [str(exc)]
        if as_json:
            out = {
                "file": target,
                "size_bytes": source.size(),
                "offsets_absolute": header.offsets_absolute,
                "metadata": None
                if known is None
                else {"object_key": known.object_key, "state": known.state, "level": known.level},
                "chunks": [
                    {
                        "topic_id": str(e.topic_id),
                        "topic": names.get(e.topic_id),
                        "assigned": None
                        if r is None
                        else [
                            {
                                "chunk_id": c.location.chunk_id,
                                "base_offset": c.location.base_offset,
                                "last_offset": c.location.last_offset,
                            }
                            for c in r
                        ],
                        "partition": e.partition,
                        "base_offset": e.base_offset,
                        "last_offset": e.last_offset,
                        "batches": e.batch_count,
                        "records": e.record_count,
                        "bytes": e.byte_length,
                        "position": e.data_position,
                        "min_timestamp": e.min_timestamp,
                        "max_timestamp": e.max_timestamp,
                        "has_bitmap": e.present_offsets is not None,
                    }
                    for e, r in zip(entries, rows, strict=True)
                ],
                "problems": problems if verify else None,
            }
            print(json.dumps(out, indent=2))
        else:
            # piped output (files, grep) gets full-width rows rather than an 80-column squeeze
            console = stdout_console()
            kind = "compactor output (absolute offsets)" if header.offsets_absolute else "agent file"
            console.print(f"[bold]{target}[/]: {source.size()} bytes, {len(entries)} chunks, {kind}")
            if known is not None:
                state = known.state or "not in metadata (never committed, or collected)"
                console.print(f"metadata: {known.object_key}: {state}")
            table = Table()
            for col in (
                "topic" if known is not None else "topic id",
                "part",
                "offsets",
                "batches",
                "records",
                "bytes",
                "at",
                "timestamps",
            ):
                table.add_column(col)
            for e, r in zip(entries, rows, strict=True):
                offsets = _offsets_text(e, r)
                table.add_row(
                    names.get(e.topic_id) or str(e.topic_id),
                    str(e.partition),
                    offsets + (" +holes" if e.present_offsets else ""),
                    str(e.batch_count),
                    str(e.record_count),
                    str(e.byte_length),
                    str(e.data_position),
                    f"{_ts(e.min_timestamp)} .. {_ts(e.max_timestamp)}",
                )
            console.print(table)
            if verify:
                if problems:
                    for p in problems:
                        console.print(f"[red]problem:[/] {p}")
                else:
                    console.print("[green]verified:[/] every chunk header, batch CRC and record decodes")
        return 1 if problems else 0
    finally:
        source.close()

"""The pod writer: one produce buffer for all of a pod's workers (agent.workers).

Each worker connects to the writer's Unix socket and sends its validated batches
(agent.workers.wire APPEND frames). The writer appends them, in the order each worker sent
them, to the pod's one `ProduceBuffer`, which seals one file per flush interval whatever the
number of workers, PUTs it and commits it: the pod's PUT rate is one worker's. Then:

1. every worker gets a FILE frame (the file's chunk rows and where each stored batch lies),
   so it can answer fetches of those partitions at once, from memory (the chunk-location
   cache and commit watch, as agent.runtime wires them, and the range cache fed with the
   worker's own bytes: agent.workers.kept_runs);
2. each append's outcome (offsets or error) goes back to the worker that sent it, in a
   RESULTS frame per loop turn (appends resolved together travel together).

Back-pressure: a worker's appends are read one frame at a time and wait for the buffer's
room (`append_nowait`), so a full buffer stops the reading of that worker's socket, whose
own client then stops taking appends (`max_buffered_bytes` on each side). A worker that
stops reading (its socket's send buffer past `MAX_UNREAD_BYTES`) is disconnected: its
pending appends are answered, and the worker, losing the writer, shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable, Collection, Sequence

from skiff.agent.produce_buffer import CommittedFile, ProduceBuffer
from skiff.agent.workers.ring import map_ring
from skiff.agent.workers.wire import (
    APPEND,
    FLUSH,
    FLUSHED,
    FRAME_HEAD_BYTES,
    HELLO_BYTES,
    CommittedFileNews,
    FileChunk,
    PlacedBatch,
    WireError,
    decode_appends,
    decode_id,
    encode_file,
    encode_id,
    encode_results,
    frame_header,
    parse_hello,
)
from skiff.metadata.types import BatchResult

log = logging.getLogger(__name__)

MAX_UNREAD_BYTES = 64 * 1024 * 1024  # a worker further behind than this is cut off
_STREAM_LIMIT = 1024 * 1024
HELLO_TIMEOUT_S = 10.0  # for a connected worker to send its hello and ring
CLOSE_TIMEOUT_S = 5.0  # for the workers' connections to end once the buffer is closed


def file_chunks(committed: CommittedFile, *, placed: bool) -> tuple[FileChunk, ...]:
    """Each chunk of a committed file: its rows and flags, and (with `placed`) where each
    stored batch lies in the file. The one reading of a commit's outcome, for an agent's
    own caches (agent.runtime) and for a pod's workers (commit_news)."""
    chunks = []
    for spec, result in zip(committed.chunks, committed.results, strict=True):
        chunks.append(
            FileChunk(
                topic_id=spec.topic_id,
                partition=spec.partition,
                plain=not any(b.is_transactional or b.control_type >= 0 for b in spec.batches),
                markers=any(b.control_type >= 0 for b in spec.batches),
                locations=tuple(result.locations),
                placed=tuple(
                    PlacedBatch(r.base_offset, b.byte_offset, b.byte_length)
                    for b, r in zip(spec.batches, result.batches, strict=False)
                    if not r.error_code and not r.duplicate and r.base_offset >= 0
                )
                if placed
                else (),
            )
        )
    return tuple(chunks)


def commit_news(committed: CommittedFile, post_seal_estimate_s: float) -> CommittedFileNews:
    """What workers learn of a committed file: chunk rows, flags, stored batches' places."""
    return CommittedFileNews(committed.object_key, post_seal_estimate_s, file_chunks(committed, placed=True))


class _WorkerLink:
    """One worker's connection: its appends in, its outcomes and the files' news out."""

    def __init__(self, writer: asyncio.StreamWriter, ring: memoryview) -> None:
        self.writer = writer
        self.ring = ring  # the worker's batches, mapped (agent.workers.ring)
        self._ready: list[tuple[int, Sequence[BatchResult]]] = []
        self._scheduled = False

    def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            log.error(
                "pod writer: a worker stopped reading (%d bytes unread); cutting it off", MAX_UNREAD_BYTES
            )
            self.writer.transport.abort()

    def resolved(self, append_id: int, outcomes: Sequence[BatchResult]) -> None:
        """Queue one append's outcomes; they leave in one frame at the end of this loop turn."""
        self._ready.append((append_id, outcomes))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_results)

    def _send_results(self) -> None:
        self._scheduled = False
        ready, self._ready = self._ready, []
        if ready:
            self.send(encode_results(ready))


class PodWriter:
    """Serves `buffer` to the pod's workers on a Unix socket (see the module docstring).

    The buffer must be built with `on_committed=writer.on_committed` (the news reaches the
    workers before the acks): `PodWriter.attach` does that wiring."""

    def __init__(self, buffer: ProduceBuffer, allowed_pids: Callable[[], Collection[int]]) -> None:
        self.buffer = buffer
        # The processes that may connect (the pod's workers): checked by the peer's
        # credentials, since an abstract socket has no file permissions.
        self._allowed_pids = allowed_pids
        self._links: set[_WorkerLink] = set()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.appends = 0  # appends taken (metrics, tests)
        self.workers_connected = 0

    def on_committed(self, committed: CommittedFile) -> None:
        data = encode_file(commit_news(committed, self.buffer.post_seal_estimate_s))
        for link in list(self._links):
            link.send(data)

    async def start(self, path: str) -> None:
        """Listen on `path`: a Unix socket path, or an abstract name (a leading NUL: no file,
        so a read-only root filesystem is fine)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        if not path.startswith("\0"):
            os.chmod(path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
        self._listener = sock
        self._accepting = asyncio.get_running_loop().create_task(self._accept(sock), name="pod-writer-accept")

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            task = loop.create_task(self._welcome(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _welcome(self, conn: socket.socket) -> None:
        """Take a worker's hello and its ring's descriptor, then serve it."""
        try:
            pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if pid not in self._allowed_pids():
                raise WireError(f"process {pid} is not one of this pod's workers")
            conn.setblocking(True)
            conn.settimeout(HELLO_TIMEOUT_S)
            data, fds, _, _ = await asyncio.to_thread(socket.recv_fds, conn, HELLO_BYTES, 1)
            ring_bytes = parse_hello(data)
            if len(fds) != 1:
                raise WireError("a worker's hello came without its ring")
            ring = map_ring(fds[0], ring_bytes)
        except (OSError, WireError) as e:
            log.error("pod writer: a worker's hello failed (%s); disconnecting it", e)
            conn.close()
            return
        conn.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=_STREAM_LIMIT)
        await self._serve(reader, writer, ring)

    async def close(self) -> None:
        """Stop taking workers, seal and commit what is buffered, answer it, disconnect."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        if self._listener is not None:
            self._listener.close()
        await self.buffer.close()
        await asyncio.sleep(0)  # the last outcomes leave (they are sent at the end of a loop turn)
        for link in list(self._links):
            link.writer.close()  # its reader then ends, and so does its _serve task
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSE_TIMEOUT_S)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ring: memoryview
    ) -> None:
        link = _WorkerLink(writer, ring)
        self._links.add(link)
        self.workers_connected += 1
        try:
            await self._read(reader, link)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker went away; what it appended is still committed
        except WireError as e:
            log.error("pod writer: a worker sent a bad frame (%s); disconnecting it", e)
        except Exception:  # boundary: the worker answers its pending appends once disconnected
            log.exception("pod writer: serving a worker failed; disconnecting it")
        finally:
            self._links.discard(link)
            self.workers_connected -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read(self, reader: asyncio.StreamReader, link: _WorkerLink) -> None:
        while True:
            length, kind = frame_header(await reader.readexactly(FRAME_HEAD_BYTES))
            payload = memoryview(await reader.readexactly(length))
            if kind == APPEND:
                for a in decode_appends(payload, link.ring):
                    futures = await self.buffer.append_nowait(a.topic_id, a.partition, a.batches)
                    self.appends += 1
                    _when_all_done(futures, a.append_id, link)
            elif kind == FLUSH:
                flush_id = decode_id(payload)
                task = asyncio.get_running_loop().create_task(self._flush(flush_id, link))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                raise WireError(f"unknown frame kind {kind} from a worker")

    async def _flush(self, flush_id: int, link: _WorkerLink) -> None:
        await self.buffer.flush()
        link.send(encode_id(FLUSHED, flush_id))


def _when_all_done(futures: list[asyncio.Future[BatchResult]], append_id: int, link: _WorkerLink) -> None:
    """Send the append's outcomes once the last of its batches is resolved (no task each)."""
    left = len(futures)

    def one_done(_fut: asyncio.Future[BatchResult]) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            link.resolved(append_id, [f.result() for f in futures])

    for fut in futures:
        fut.add_done_callback(one_done)

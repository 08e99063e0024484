"""Reading many znodes in few requests: ZooKeeper's read-only multi (``multiRead``, 3.6+).

kazoo 2.11 sends one request per ``get``; its connection thread handles them one at a time,
so reading 100,000 job znodes that way costs tens of seconds of Python. A read-only multi
carries hundreds of ``getData`` in one request and answers each separately (a missing znode
is an error for that entry only, not for the batch). kazoo has no call for it, so this module
gives it the request class kazoo's connection expects (``type``, ``serialize``,
``deserialize``) and queues it like kazoo's own ``Transaction``. Servers older than 3.6 answer
"unimplemented"; then the reads fall back to pipelined ``get`` calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import GetData, int_struct, multiheader_struct, stat_struct
from kazoo.protocol.states import ZnodeStat

from tenure.backends.zookeeper.calls import Answer, Client, ZkIo

BATCH = 1000  # getData per request: about 300 KB of tenure records in the answer
IN_FLIGHT = 3  # requests sent ahead of the one being decoded
# Jute's multi framing: each getData's header (type 4, not done, no error), and the closing one.
_GET_HEADER = multiheader_struct.pack(GetData.type, False, -1)
_CLOSING = multiheader_struct.pack(-1, True, -1)


class MultiRead:
    """ZooKeeper's ``multiRead`` request (OpCode 22) of ``getData`` operations, answered with
    each znode's (data, version), or with its data and whole stat (``stats``: ``numChildren``,
    ``cversion`` ..., for the few znodes whose counts the operators' queries read)."""

    type = 22

    def __init__(self, paths: list[str], stats: bool = False) -> None:
        self.paths = paths  # absolute, chroot included
        self.stats = stats

    def serialize(self) -> bytes:
        """The bytes kazoo's ``Transaction`` of ``GetData(path, None)`` would send, built in one
        join: kazoo's per-operation serializers cost 0.37 s of a 100,000-job listing."""
        parts: list[bytes] = []
        pack_int = int_struct.pack
        for path in self.paths:
            raw = path.encode()
            parts += (_GET_HEADER, pack_int(len(raw)), raw, b"\0")  # the path; then "no watch"
        parts.append(_CLOSING)
        return b"".join(parts)

    def deserialize(self, buf: bytes, offset: int) -> list[Any]:
        """Each entry's answer, or the error ZooKeeper answered for it."""
        results: list[Any] = []
        unpack_int, unpack_header = int_struct.unpack_from, multiheader_struct.unpack_from
        header_size, stat_size = multiheader_struct.size, stat_struct.size
        while True:
            kind, done, _ = unpack_header(buf, offset)
            offset += header_size
            if done:
                return results
            if kind == GetData.type:
                length = unpack_int(buf, offset)[0]
                offset += 4
                data = b""
                if length > 0:
                    data = bytes(buf[offset:offset + length])
                    offset += length
                # The stat: czxid, mzxid, ctime, mtime (8 bytes each), then the version.
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buf, offset)) if self.stats
                                else unpack_int(buf, offset + 32)[0]))
                offset += stat_size
            elif kind == -1:
                results.append(EXCEPTIONS[unpack_int(buf, offset)[0]]())
                offset += 4
            else:
                raise ValueError(f"unexpected operation {kind} in a multiRead answer")

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} reads)"


def _send(client: Client, paths: list[str], stats: bool = False) -> Answer[list[Any]]:
    """A multiRead of ``paths``, queued as kazoo's own ``Transaction`` is; its answer to wait for."""
    result: Answer[list[Any]] = client.handler.async_result()
    chroot = client.chroot
    client._call(MultiRead([_prefix_root(chroot, p) for p in paths] if chroot else paths, stats), result)
    return result


def read_many(client: Client, paths: list[str], timeout: float,
              batch: int = BATCH) -> Iterator[tuple[str, bytes, int]]:
    """(path, data, version) for each znode in ``paths`` that exists, in order; ``IN_FLIGHT``
    requests of ``batch`` reads each are kept in flight while answers are decoded, and each
    chunk's answers are handed on before the next is waited for (listings of 100,000 jobs)."""
    ready: list[tuple[str, bytes, int]] = []
    io = _reading(client, paths, batch, ready.extend)
    try:
        result = next(io)
        while True:
            yield from ready
            ready.clear()
            try:
                value = result.get(timeout=timeout)
            except Exception as exc:  # handed to the reads, which fall back or raise it
                result = io.throw(exc)
            else:
                result = io.send(value)
    except StopIteration:
        yield from ready


def reading_many(client: Client, paths: list[str], batch: int = BATCH) -> ZkIo[list[tuple[str, bytes, int]]]:
    """``read_many`` as one ``ZkIo`` (``calls``), for a step's reads: the same requests, as many
    in flight (the first sent now, with whatever the step sends next), gathered in a list."""
    got: list[tuple[str, bytes, int]] = []
    return _gathered(_reading(client, paths, batch, got.extend), got)


def _gathered(io: ZkIo[None], got: list[tuple[str, bytes, int]]) -> ZkIo[list[tuple[str, bytes, int]]]:
    yield from io
    return got


def _reading(client: Client, paths: list[str], batch: int,
             found: Callable[[Iterable[tuple[str, bytes, int]]], None]) -> ZkIo[None]:
    """The reads of ``read_many`` and ``reading_many``: ``IN_FLIGHT`` requests sent at once,
    the rest as answers come in, each chunk's answers given to ``found``."""
    sent: deque[tuple[list[str], Answer[list[Any]]]] = deque()
    pending = iter([paths[i:i + batch] for i in range(0, len(paths), batch)])
    for _ in range(IN_FLIGHT):
        _send_next(client, pending, sent)
    return _answers(client, pending, sent, found)


def _answers(client: Client, pending: Iterator[list[str]], sent: deque[tuple[list[str], Answer[list[Any]]]],
             found: Callable[[Iterable[tuple[str, bytes, int]]], None]) -> ZkIo[None]:
    while sent:
        chunk, result = sent.popleft()
        _send_next(client, pending, sent)
        try:
            answers = yield result
        except UnimplementedError:  # a server before 3.6: one get per znode
            rest = [p for c in [chunk, *(c for c, _ in sent), *pending] for p in c]
            for start in range(0, len(rest), 500):
                found((yield from _getting(client, rest[start:start + 500])))
            return
        found(_found(chunk, answers))


def _send_next(client: Client, pending: Iterator[list[str]], sent: deque[tuple[list[str], Answer[list[Any]]]]) -> None:
    chunk = next(pending, None)
    if chunk is not None:
        sent.append((chunk, _send(client, chunk)))


def _found(chunk: list[str], answers: list[Any]) -> Iterator[tuple[str, bytes, int]]:
    """Each znode's answer that found one (one deleted since it was listed is passed over)."""
    for path, answer in zip(chunk, _existing(answers), strict=True):
        if answer is not None:
            yield path, answer[0], answer[1]


def _existing(answers: list[Any]) -> list[Any]:
    """The answers, None for a missing znode; any other error raised."""
    if error := next((a for a in answers if isinstance(a, Exception) and not isinstance(a, NoNodeError)), None):
        raise error
    return [None if isinstance(a, NoNodeError) else a for a in answers]


def _getting(client: Client, paths: list[str]) -> ZkIo[list[tuple[str, bytes, int]]]:
    """One pipelined ``get`` per znode (servers before 3.6)."""
    results = [client.get_async(p) for p in paths]
    got: list[tuple[str, bytes, int]] = []
    for path, result in zip(paths, results, strict=True):
        try:
            data, stat = yield result
        except NoNodeError:
            continue
        got.append((path, data or b"", stat.version))
    return got


def read_together(client: Client, paths: list[str], timeout: float) -> list[tuple[bytes, ZnodeStat] | None]:
    """Data and stat of every znode in ``paths`` (None where there is none), read by ONE
    request: a server answers a multiRead as one request, with no write applied in between,
    so the answers are one moment of that server's state. Needs ZooKeeper 3.6 or later."""
    return _existing(_send(client, paths, stats=True).get(timeout=timeout))

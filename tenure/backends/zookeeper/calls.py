"""ZooKeeper I/O written once for the sync backend and for tenure.aio (``tenure.core.io_drivers``):
a ``ZkIo[T]`` sends its requests with kazoo's ``*_async`` calls and yields each one's ``Answer``.

An ``Answer`` is the one effect ZooKeeper's I/O yields: kazoo sends a request without blocking
in both flavours, so a generator sends its own (pipelined: several sent before the first is
waited for) and only the wait differs. ``Client`` is the kazoo client as tenure calls it, each
request typed by what it answers (kazoo has no types), so mypy checks every request's
arguments and that every yield is an answer. What is sent back is that answer's value, whose
type a generator's one send type cannot follow per yield: it is ``Any`` (as etcd's).

``run`` waits with ``Answer.get(timeout)``: the sync backend's calls, unchanged.
``run_async`` awaits each answer bridged to an asyncio future (``rawlink``, then
``loop.call_soon_threadsafe`` from kazoo's completion thread): no thread per call, and a wait
that outlasts the timeout raises kazoo's own timeout error, as ``get`` does. ``detached``
waits for nothing: each answer resumes the ``ZkIo`` on kazoo's completion thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar, overload

from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from tenure.core import io_drivers

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
__all__ = ["Answer", "Client", "Multi", "ZkIo", "awaited", "detached", "run", "run_async"]


class Answer(Protocol[T_co]):
    """A request kazoo sent, answered later: its ``IAsyncResult``, typed by what it answers."""

    @property
    def value(self) -> T_co: ...

    @property
    def exception(self) -> BaseException: ...  # of an answer that was not ``successful``

    def get(self, block: bool = True, timeout: float | None = None) -> T_co: ...

    def successful(self) -> bool: ...

    def rawlink(self, callback: Callable[[Answer[T_co]], None]) -> None: ...

    def unlink(self, callback: Callable[[Answer[T_co]], None]) -> None: ...


Effect = Answer[object]  # all ZooKeeper's I/O yields: a request's answer to wait for
ZkIo = io_drivers.IoOf[Effect, T]
Watcher = Callable[[Any], None]  # kazoo calls it with a WatchedEvent
MultiResults = list[Any]  # each operation's answer (a path, a stat, True) or the error it met


class Multi(Protocol):
    """A kazoo multi (``Client.transaction``): its operations, sent as one request."""

    client: Client
    operations: list[Any]  # kazoo's Create, SetData, CheckVersion, Delete (``multi``)

    def create(self, path: str, value: bytes = b"") -> object: ...

    def set_data(self, path: str, value: bytes, version: int = -1) -> object: ...

    def check(self, path: str, version: int) -> object: ...

    def delete(self, path: str, version: int = -1) -> object: ...

    def commit_async(self) -> Answer[MultiResults]: ...

    def commit(self) -> MultiResults: ...


class Client(Protocol):
    """The kazoo client as tenure calls it: the requests its I/O sends, typed by their answers,
    and the blocking calls of setup, queries and upgrades."""

    handler: Any
    chroot: str
    default_acl: Any
    client_id: tuple[int, bytes] | None

    def get_async(self, path: str, watch: Watcher | None = None) -> Answer[tuple[bytes | None, ZnodeStat]]: ...

    def exists_async(self, path: str, watch: Watcher | None = None) -> Answer[ZnodeStat | None]: ...

    def set_async(self, path: str, value: bytes, version: int = -1) -> Answer[ZnodeStat]: ...

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> Answer[str]: ...

    def delete_async(self, path: str, version: int = -1) -> Answer[bool]: ...

    @overload
    def get_children_async(self, path: str, watch: Watcher | None = None,
                           include_data: Literal[False] = False) -> Answer[list[str]]: ...

    @overload
    def get_children_async(self, path: str, *, include_data: Literal[True]) -> Answer[tuple[list[str], ZnodeStat]]: ...

    def get_acls_async(self, path: str) -> Answer[tuple[list[Any], ZnodeStat]]: ...

    def set_acls_async(self, path: str, acls: list[Any], version: int = -1) -> Answer[ZnodeStat]: ...

    def transaction(self) -> Multi: ...

    def _call(self, request: object, async_object: Answer[Any]) -> object: ...  # multiread's own request

    # -- blocking: the connection, setup, operators' queries and upgrades ---------------------
    state: str

    def start(self, timeout: float) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...

    def add_listener(self, listener: Callable[[str], None]) -> None: ...

    def command(self, cmd: bytes) -> str: ...

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes | None, ZnodeStat]: ...

    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None: ...

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str: ...

    @overload
    def get_children(self, path: str, watch: Watcher | None = None,
                     include_data: Literal[False] = False) -> list[str]: ...

    @overload
    def get_children(self, path: str, *, include_data: Literal[True]) -> tuple[list[str], ZnodeStat]: ...


def run(io: ZkIo[T], timeout: float) -> T:
    """``io``, each answer waited for in this thread."""
    return io_drivers.run(io, lambda answer: answer.get(timeout=timeout))


async def run_async(io: ZkIo[T], timeout: float) -> T:
    """``io``, each answer awaited in the running loop."""
    return await io_drivers.run_async(io, lambda answer: awaited(answer, timeout))


def detached(io: ZkIo[None], ended: Callable[[BaseException | None], None]) -> None:
    """``io`` with nobody waiting for it: started here, then resumed by each answer on kazoo's
    completion thread (``rawlink``); ``ended(error)`` once it returns or raises. For tidying
    that must not hold up the request it follows (an audit trim after a renewal's commit). A
    request of a closed client fails, which ends it."""
    def resume(step: Callable[[], Effect]) -> None:
        try:
            pending = step()
        except StopIteration:
            ended(None)
        except Exception as exc:
            ended(exc)
        else:
            pending.rawlink(answered)

    def answered(answer: Effect) -> None:
        if answer.successful():
            resume(functools.partial(io.send, answer.value))
        else:
            resume(functools.partial(io.throw, answer.exception))

    resume(functools.partial(next, io))


async def awaited(answer: Answer[T], timeout: float) -> T:
    """The value of a kazoo ``IAsyncResult``, awaited; ``KazooTimeoutError`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(done: Answer[T]) -> None:  # on kazoo's completion thread
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, done)

    answer.rawlink(settle)
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        raise KazooTimeoutError(f"Value not received within {timeout} seconds") from None
    finally:
        answer.unlink(settle)


def _settle(future: asyncio.Future[T], done: Answer[T]) -> None:
    if future.done():
        return  # timed out or cancelled meanwhile
    if done.successful():
        future.set_result(done.value)
    else:
        future.set_exception(done.exception)

"""The one module that talks to etcd: gRPC channels, etcd's generated stubs, errors mapped once.

Messages and stubs come from ``tenure.backends.etcd.api``, generated from tenure's own
description of etcd's wire format. They run on protobuf's default (upb) runtime and change
nothing process-wide, so tenure shares a process with any other protobuf or gRPC user.

No maintained Python etcd client gives what the backend needs together: every endpoint of a
cluster with rotation, control over which requests are retried, requests sent side by side
(a keep-alive travelling beside a transaction) and the revision of every response. So
``Connection`` is tenure's own. gRPC errors become tenure errors in :func:`mapped_error`.

Written once for both flavours: a request's endpoint rotation, login, retry and error mapping
(``Connection._calling``) is a generator that yields the ``Rpc`` to send and is sent its answer
(or has the gRPC error thrown in). ``Connection`` sends each on its blocking channels, exactly the
calls it always made; ``AioConnection`` (tenure.aio) sends them on ``grpc.aio`` channels to the
same endpoints, awaited in the event loop. The protocol's own I/O (``transaction``, ``leases``,
``claimable``) is written as generators too (``EtcdIo``, checked by mypy), yielding
``Connection``'s requests as typed effects (``Txn``, ``Range``, ``Grant``...), the ``Pending``
answers of requests started beside others and the core's pause before an attempt again
(``contention.Pause``, from ``steps.attempted``); ``Connection.run`` and ``AioConnection.run``
carry them out with the core's drivers (``tenure.core.io_drivers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import grpc
from google.protobuf.runtime_version import VersionError

from tenure.core import contention, io_drivers
from tenure.core.errors import AuthenticationFailed, BackendUnavailable, LeaseError, OutcomeUnknown

try:
    from tenure.backends.etcd.api import kv_pb2, rpc_pb2, rpc_pb2_grpc
except (VersionError, RuntimeError) as exc:  # protobuf or grpcio older than the generated code
    raise BackendUnavailable(f"the etcd backend cannot load its generated code ({exc}); "
                             "pip install 'tenure[etcd]' installs versions that can") from exc

log = logging.getLogger("tenure.etcd")
T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...] | None

KV = kv_pb2.KeyValue  # key, value, create_revision, mod_revision, lease (read, never built)
# A request op or compare is the dict its message is built from: ``txn_request`` builds the whole
# Txn in one call, where ops built as messages one by one cost as much again, each copied in.
OpSpec = dict[str, Any]
CompareSpec = dict[str, Any]
_Stubs: Any = rpc_pb2_grpc  # generated without annotations


def mapped_error(exc: BaseException, endpoint: str, timeout: float, *, write: bool = False) -> LeaseError:
    """The one place where gRPC errors become tenure errors (raise it ``from exc``).

    ``write``: the request may change the store (a transaction sent once). One that timed out,
    or whose connection broke once it could have been sent, may have been applied: that is
    ``OutcomeUnknown``, never a refusal and never sent again. A request gRPC could not send
    (no connection to the member) was not applied: plain ``BackendUnavailable``."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code, details = exc.code(), exc.details() or ""
        lowered = details.lower()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or any(
                text in lowered for text in ("authentication failed", "user name is empty",
                                             "invalid auth token", "permission denied")):
            return AuthenticationFailed(f"etcd at {endpoint} refused the credentials: {details}")
        if "requested lease not found" in lowered:
            return LeaseNotFound(f"etcd at {endpoint}: {details}")
        if "database space exceeded" in lowered:  # RESOURCE_EXHAUSTED: etcd's NOSPACE alarm
            return BackendUnavailable(
                f"etcd at {endpoint} is out of space ({details}): it refuses every write until its alarm "
                "is disarmed, so nothing was written and no lease can be claimed or renewed. Compact "
                "and defragment it, then disarm the alarm (etcdctl compact, defrag, alarm disarm), and "
                "run it with --auto-compaction-mode and --auto-compaction-retention and a "
                "--quota-backend-bytes sized for the workload (docs/backends/etcd.md, \"Space\")")
        uncertain = write and code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                                       grpc.StatusCode.CANCELLED) and not _never_sent(lowered)
        if uncertain:
            lost = (f"did not answer within {timeout:g}s" if code == grpc.StatusCode.DEADLINE_EXCEEDED
                    else f"lost the answer ({code.name}: {details})")
            return OutcomeUnknown(f"etcd at {endpoint} {lost}: a write sent may or may not have been applied; "
                                  "read the job before acting on it")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return BackendUnavailable(f"etcd at {endpoint} did not answer within {timeout:g}s")
        if code == grpc.StatusCode.UNAVAILABLE:
            return BackendUnavailable(f"etcd at {endpoint} is unavailable: {details}")
        return BackendUnavailable(f"etcd at {endpoint} failed the request: {code.name}: {details}")
    return BackendUnavailable(f"etcd at {endpoint}: {exc}")


def _never_sent(details: str) -> bool:
    """Whether gRPC's status details say the request never left: no connection was made."""
    return "failed to connect" in details or "connection refused" in details


class LeaseNotFound(BackendUnavailable):
    """A write named an etcd lease that no longer exists; nothing was written."""


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and exc.code() in (
        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class Event:
    deleted: bool
    kv: KV


# -- request builders and response readers: no I/O ---------------------------------------------
_TARGETS = {"create": rpc_pb2.Compare.CREATE, "mod": rpc_pb2.Compare.MOD, "value": rpc_pb2.Compare.VALUE}
_RESULTS = {"==": rpc_pb2.Compare.EQUAL, ">": rpc_pb2.Compare.GREATER, "<": rpc_pb2.Compare.LESS}
_FIELDS = {"create": "create_revision", "mod": "mod_revision"}  # the compared number's field by target
# A claim's ops are written out as the dicts ``get``, ``put``, ``delete`` and ``compare`` build
# (the same bytes; tests/backends/test_etcd_api.py), a call fewer each; these are what they name.
CREATE, MOD = rpc_pb2.Compare.CREATE, rpc_pb2.Compare.MOD


# Only the fields that differ from proto3's defaults are named (the same bytes either way): upb
# looks each named field up by its name, and most of a hot path's are defaults.
def put(key: bytes, value: bytes, lease: int = 0, prev_kv: bool = False) -> OpSpec:
    fields: dict[str, Any] = {"key": key, "value": value}
    if lease:
        fields["lease"] = lease
    if prev_kv:
        fields["prev_kv"] = True
    return {"request_put": fields}


def delete(key: bytes, prev_kv: bool = False) -> OpSpec:
    return {"request_delete_range": {"key": key, "prev_kv": True} if prev_kv else {"key": key}}


def range_request(key: bytes, end: bytes = b"", *, limit: int = 0, revision: int = 0, newest_first: bool = False,
                  by_create: bool = False, keys_only: bool = False, by_mod: bool = False) -> Any:
    """A ``RangeRequest``, sorted by key (or by create or mod revision), oldest or newest first."""
    return rpc_pb2.RangeRequest(
        key=key, range_end=end, limit=limit, revision=revision, keys_only=keys_only,
        sort_order=rpc_pb2.RangeRequest.DESCEND if newest_first else rpc_pb2.RangeRequest.ASCEND,
        sort_target=rpc_pb2.RangeRequest.CREATE if by_create else rpc_pb2.RangeRequest.MOD if by_mod
        else rpc_pb2.RangeRequest.KEY)


def get(key: bytes, end: bytes = b"", *, keys_only: bool = False, revision: int = 0, limit: int = 0,
        count_only: bool = False, created_after: int = 0) -> OpSpec:
    """``count_only``: the answer carries only how many keys the range holds (``TxnResult.counts``);
    ``created_after``: only keys created after that revision (etcd still walks the range)."""
    if not (end or keys_only or revision or limit or count_only or created_after):
        return {"request_range": {"key": key}}  # one key, as of now: most reads
    return {"request_range": {
        "key": key, "range_end": end, "keys_only": keys_only, "revision": revision, "limit": limit,
        "count_only": count_only, "min_create_revision": created_after + 1 if created_after else 0}}


def txn_request(compares: list[CompareSpec], success: list[OpSpec], failure: list[OpSpec]) -> Any:
    return rpc_pb2.TxnRequest(compare=compares, success=success, failure=failure)


def txn(compares: list[CompareSpec], success: list[OpSpec], failure: list[OpSpec]) -> OpSpec:
    """A transaction inside a branch of another (etcd 3.3 and later)."""
    return {"request_txn": {"compare": compares, "success": success, "failure": failure}}


def compare(key: bytes, target: str, op: str, value: int | bytes) -> CompareSpec:
    """``target``: create, mod or value; ``op``: ==, <, >. A number is set even when 0 (a
    member of the target oneof: etcd compares with 0, not with nothing)."""
    field = "value" if isinstance(value, bytes) else _FIELDS.get(target, "mod_revision")
    result = _RESULTS[op]
    if result:
        return {"result": result, "target": _TARGETS[target], "key": key, field: value}
    return {"target": _TARGETS[target], "key": key, field: value}  # EQUAL, proto3's default


def size(op: OpSpec) -> int:
    """The bytes ``op`` takes in a request (a batch's budget: built here once more to count)."""
    return int(rpc_pb2.RequestOp(**op).ByteSize())


class TxnResult:
    """A ``TxnResponse`` as the backend reads it: each part decoded when first asked for (a
    commit that succeeded reads its revision, and at most the previous values)."""

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.succeeded: bool = resp.succeeded
        self.revision: int = resp.header.revision

    @functools.cached_property
    def _parts(self) -> tuple[list[list[KV]], list[KV], list[TxnResult], list[int]]:
        ranges: list[list[KV]] = []
        prev: list[KV] = []
        nested: list[TxnResult] = []
        counts: list[int] = []
        for op in self._resp.responses:
            kind = op.WhichOneof("response")
            if kind == "response_range":
                ranges.append(list(op.response_range.kvs))
                counts.append(int(op.response_range.count))
            elif kind == "response_put":
                if op.response_put.HasField("prev_kv"):
                    prev.append(op.response_put.prev_kv)
            elif kind == "response_delete_range":
                prev.extend(op.response_delete_range.prev_kvs)
            elif kind == "response_txn":
                nested.append(TxnResult(op.response_txn))
        return ranges, prev, nested, counts

    @property
    def ranges(self) -> list[list[KV]]:
        """One per range op of the branch that ran, in order."""
        return self._parts[0]

    @property
    def prev(self) -> list[KV]:
        """Previous values returned by put/delete with prev_kv."""
        return self._parts[1]

    @property
    def nested(self) -> list[TxnResult]:
        """Of the txn ops in the branch that ran."""
        return self._parts[2]

    @property
    def counts(self) -> list[int]:
        """How many keys each range op holds."""
        return self._parts[3]


def _granted(resp: Any) -> tuple[int, int]:
    if resp.error:
        raise BackendUnavailable(f"etcd refused a lease: {resp.error}")
    return int(resp.ID), int(resp.TTL)


def _ranged(resp: Any) -> tuple[list[KV], int, bool]:
    return list(resp.kvs), int(resp.header.revision), bool(resp.more)


def _kept(resp: Any) -> int:
    """A keep-alive's first answer: the TTL restarted, 0 if the lease no longer exists."""
    return 0 if resp is None else int(resp.TTL)


def _kept_each(lease_ids: list[int], responses: Any) -> list[int]:
    """Keep-alives' answers by lease, in ``lease_ids``' order: 0 for a lease gone or not answered."""
    kept = {int(resp.ID): int(resp.TTL) for resp in responses}
    return [kept.get(lease_id, 0) for lease_id in lease_ids]


def _lived(resp: Any) -> tuple[int, int]:
    return int(resp.TTL), int(resp.grantedTTL)


# -- the transport ------------------------------------------------------------------------------
# Pings on open streams (watches) notice a frozen server; etcd refuses pings under 5 s apart.
_CHANNEL_OPTIONS = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                    # A listing's walk of every job key in one answer (listing.scan): 1,000,000
                    # keys of 30 bytes are about 40 MB, past gRPC's default 4 MB.
                    ("grpc.max_receive_message_length", 512 * 1024 * 1024)]


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


class Method(enum.IntEnum):
    """An etcd RPC, as etcd's API names it: where ``_Endpoint.methods`` holds its stub."""

    Txn = 0
    Range = 1
    LeaseGrant = 2
    LeaseKeepAlive = 3
    LeaseTimeToLive = 4
    Authenticate = 5


class _Endpoint:
    """One member's channel and etcd's generated stubs on it."""

    def __init__(self, index: int, name: str, channel: Any) -> None:
        self.index = index
        self.name = name
        self.channel = channel
        self.kv = _Stubs.KVStub(channel)
        self.lease = _Stubs.LeaseStub(channel)
        self.watch = _Stubs.WatchStub(channel)
        self.cluster = _Stubs.ClusterStub(channel)
        self.maintenance = _Stubs.MaintenanceStub(channel)
        self.auth = _Stubs.AuthStub(channel)
        # Each Method's stub, in Method's order: an Rpc's method is found by index, not by name.
        self.methods = (self.kv.Txn, self.kv.Range, self.lease.LeaseGrant, self.lease.LeaseKeepAlive,
                        self.lease.LeaseTimeToLive, self.auth.Authenticate)
        self.metadata: tuple[tuple[str, str], ...] | None = None


class Rpc(NamedTuple):  # a tuple: made per request, cheaper than a frozen dataclass
    """One request on the wire: ``method`` of endpoint ``endpoint``."""

    endpoint: int
    method: Method
    request: Any
    metadata: Metadata
    stream: bool = False  # a stream of this one request, answered by its first response (None: none)


# The requests a generator yields besides an ``Rpc``, one kind each, answered by ``_answer``:
# called on ``Connection`` (blocking), awaited on ``AioConnection``. They are not ``Rpc``s because
# a request's endpoint, login and retry (``_request``) come with the connection, and a started
# one is a blocking future or a loop's task.
class Txn(NamedTuple):
    """``txn``: a transaction (a read-only one retried elsewhere with ``retry``)."""

    compares: list[CompareSpec]
    success: list[OpSpec]
    failure: list[OpSpec]
    retry: bool = False


class Range(NamedTuple):
    """``range``: keys in ``[key, end)``, at most ``limit`` (0: all)."""

    key: bytes
    end: bytes = b""
    limit: int = 0


class Grant(NamedTuple):
    """``grant``: a new etcd lease."""

    ttl: int


class TimeToLive(NamedTuple):
    """``time_to_live``: what is left of an etcd lease."""

    lease_id: int


class StartGrant(NamedTuple):
    """``grant_started``: a grant sent now, its ``Pending`` answer yielded later."""

    ttl: int


class StartKeepalive(NamedTuple):
    """``keepalive_started``: a keep-alive sent now, its ``Pending`` answer yielded later."""

    lease_id: int


class StartKeepalives(NamedTuple):
    """``keepalives_started``: keep-alives of many leases sent now, answered later."""

    lease_ids: list[int]


class Connection:
    """Every endpoint of one cluster; a request that cannot reach one moves on to the next.

    Reads and lease grants are retried on the next endpoint. Transactions are not: one that
    timed out may have been applied, so the caller hears BackendUnavailable and decides.
    """

    def __init__(self, hosts: list[tuple[str, int]], *, timeout: float, user: str | None = None,
                 password: str | None = None, ca_cert: str | None = None, cert_cert: str | None = None,
                 cert_key: str | None = None) -> None:
        self.timeout = timeout
        self.user, self.password = user, password
        self._credentials = None if ca_cert is None else grpc.ssl_channel_credentials(
            _read(ca_cert), _read(cert_key), _read(cert_cert))
        self.targets = [(f"{h}:{p}", f"[{h}]:{p}" if ":" in h else f"{h}:{p}") for h, p in hosts]  # name, target
        self._endpoints = [_Endpoint(i, name, self.channel(target, grpc))
                           for i, (name, target) in enumerate(self.targets)]
        self._current = 0
        self._lock = threading.Lock()
        self._closed = False
        self._revokes: set[Any] = set()  # sent and not answered yet: kept, or gRPC cancels them

    def channel(self, target: str, kind: Any) -> Any:
        """A channel to ``target`` from ``kind``: ``grpc`` (blocking) or ``grpc.aio``."""
        if self._credentials is None:
            return kind.insecure_channel(target, options=_CHANNEL_OPTIONS)
        return kind.secure_channel(target, self._credentials, options=_CHANNEL_OPTIONS)

    @property
    def endpoint(self) -> _Endpoint:
        return self._endpoints[self._current]

    def _authenticating(self, ep: _Endpoint) -> EtcdIo[None]:
        resp = yield Rpc(ep.index, Method.Authenticate,
                         rpc_pb2.AuthenticateRequest(name=self.user, password=self.password), None)
        ep.metadata = (("token", resp.token),)

    def _authenticate(self, ep: _Endpoint) -> None:
        self.run(self._authenticating(ep))

    def _calling(self, send: Callable[[_Endpoint, Metadata], EtcdIo[T]], retry: bool, left: int = 0) -> EtcdIo[T]:
        """``send(endpoint, metadata)``, moving to the next endpoint if this one is unreachable
        (``left``: endpoints still to try, if not all of them)."""
        if self._closed:
            raise BackendUnavailable("this etcd store is closed")
        attempts = (left or len(self._endpoints)) if retry else 1
        for attempt in range(attempts):
            ep = self.endpoint
            try:
                if self.user is not None and ep.metadata is None:
                    yield from self._authenticating(ep)
                try:
                    return (yield from send(ep, ep.metadata))
                except grpc.RpcError as exc:
                    # Simple auth tokens expire (5 minutes by default): log in again once.
                    if self.user is None or "invalid auth token" not in str(exc):
                        raise
                    yield from self._authenticating(ep)
                    return (yield from send(ep, ep.metadata))
            except grpc.RpcError as exc:  # tenure's own errors, and bugs, pass through unchanged
                if not _retryable(exc):
                    raise mapped_error(exc, ep.name, self.timeout, write=not retry) from exc
                self._rotate(ep)
                if attempt == attempts - 1:
                    raise mapped_error(exc, ep.name, self.timeout, write=not retry) from exc
        raise AssertionError("unreachable")

    def _request(self, method: Method, request: Any, finish: Callable[[Any], T], *,
                 retry: bool, stream: bool = False) -> EtcdIo[T]:
        """One request as ``_calling`` sends it, the common case first: no login and an answer
        (one generator a request, where ``_calling`` would drive a second one)."""
        if self.user is None and not self._closed:
            ep = self._endpoints[self._current]  # self.endpoint, a call less on every request
            try:
                return finish((yield Rpc(ep.index, method, request, None, stream)))
            except grpc.RpcError as exc:  # as _calling maps it
                if not _retryable(exc):
                    raise mapped_error(exc, ep.name, self.timeout, write=not retry) from exc
                self._rotate(ep)
                if not retry or len(self._endpoints) == 1:
                    raise mapped_error(exc, ep.name, self.timeout, write=not retry) from exc
            # the other endpoints, as _calling tries them
            return (yield from self._calling(self._sender(method, request, finish, stream), retry,
                                             len(self._endpoints) - 1))
        return (yield from self._calling(self._sender(method, request, finish, stream), retry))

    @staticmethod
    def _sender(method: Method, request: Any, finish: Callable[[Any], T],
                stream: bool) -> Callable[[_Endpoint, Metadata], EtcdIo[T]]:
        def send(ep: _Endpoint, md: Metadata) -> EtcdIo[T]:
            return finish((yield Rpc(ep.index, method, request, md, stream)))

        return send

    def call(self, fn: Callable[[_Endpoint, Metadata], T], *, retry: bool = True) -> T:
        """Run ``fn(endpoint, metadata)`` (blocking calls of its own), as ``_calling`` sends requests."""
        def send(ep: _Endpoint, md: Metadata) -> EtcdIo[T]:
            return fn(ep, md)
            yield  # a generator that sends nothing itself

        return self.run(self._calling(send, retry))

    def run(self, io: EtcdIo[T]) -> T:
        """``io``'s requests, each sent and waited for in this thread (the core's driver)."""
        return io_drivers.run(io, self._answer)

    def _answer(self, step: Effect) -> Any:
        if isinstance(step, Rpc):
            # Only AioConnection sends a stream Rpc (keepalive_io): this thread's keep-alives go
            # out beside a transaction instead (keepalive_started).
            assert not step.stream, "a blocking channel answers a stream only to a thread reading it"
            stub = self._endpoints[step.endpoint].methods[step.method]
            return stub(step.request, timeout=self.timeout, metadata=step.metadata)
        if isinstance(step, Txn):
            return self.txn(step.compares, step.success, step.failure, retry=step.retry)
        if isinstance(step, StartKeepalive):
            return self.keepalive_started(step.lease_id)
        if isinstance(step, Range):
            return self.range(step.key, step.end, limit=step.limit)
        if isinstance(step, Grant):
            return self.grant(step.ttl)
        if isinstance(step, TimeToLive):
            return self.time_to_live(step.lease_id)
        if isinstance(step, StartGrant):
            return self.grant_started(step.ttl)
        if isinstance(step, StartKeepalives):
            return self.keepalives_started(step.lease_ids)
        if isinstance(step, contention.Pause):  # the core's, before an attempt again
            time.sleep(step.seconds)
            return None
        return step.result()  # a Pending

    def _rotate(self, failed: _Endpoint) -> None:
        with self._lock:
            if self.endpoint is failed:
                self._current = (self._current + 1) % len(self._endpoints)

    # -- KV --------------------------------------------------------------------------------
    def txn(self, compares: list[CompareSpec], success: list[OpSpec], failure: list[OpSpec], *,
            retry: bool = False) -> TxnResult:
        # txn_io and run written out: every Txn of the sync flavour comes this way (``_answer``)
        request = rpc_pb2.TxnRequest(compare=compares, success=success, failure=failure)
        return io_drivers.run(self._request(Method.Txn, request, TxnResult, retry=retry), self._answer)

    def txn_io(self, compares: list[CompareSpec], success: list[OpSpec], failure: list[OpSpec], *,
               retry: bool = False) -> EtcdIo[TxnResult]:
        return self._request(Method.Txn, txn_request(compares, success, failure), TxnResult, retry=retry)

    def txn_started(self, compares: list[CompareSpec], success: list[OpSpec],
                    failure: list[OpSpec]) -> Pending[TxnResult]:
        """A read-only transaction sent now, answered later (retried on the next endpoint)."""
        req = txn_request(compares, success, failure)
        return self._started(lambda ep, md: ep.kv.Txn.future(req, timeout=self.timeout, metadata=md),
                             lambda f: TxnResult(f.result()),
                             lambda: self.txn(compares, success, failure, retry=True))

    def range(self, key: bytes, end: bytes = b"", *, revision: int = 0, limit: int = 0,
              newest_first: bool = False, by_create: bool = False,
              keys_only: bool = False, by_mod: bool = False) -> tuple[list[KV], int, bool]:
        """Keys in ``[key, end)`` as ``(kvs, revision read at, more)``."""
        return self.run(self.range_io(key, end, revision=revision, limit=limit, newest_first=newest_first,
                                      by_create=by_create, keys_only=keys_only, by_mod=by_mod))

    def range_io(self, key: bytes, end: bytes = b"", *, revision: int = 0, limit: int = 0,
                 newest_first: bool = False, by_create: bool = False,
                 keys_only: bool = False, by_mod: bool = False) -> EtcdIo[tuple[list[KV], int, bool]]:
        req = range_request(key, end, limit=limit, revision=revision, newest_first=newest_first,
                            by_create=by_create, keys_only=keys_only, by_mod=by_mod)
        return self._request(Method.Range, req, _ranged, retry=True)

    # -- leases ----------------------------------------------------------------------------
    def _started(self, start: Callable[[_Endpoint, Any], Any], finish: Callable[[Any], T],
                 again: Callable[[], T] | None) -> Pending[T]:
        """Send a request now and collect its answer later, without a thread of our own."""
        if self._closed:
            raise BackendUnavailable("this etcd store is closed")
        ep = self._endpoints[self._current]  # self.endpoint, a call less (a claim's grant comes this way)
        try:
            if self.user is not None and ep.metadata is None:
                self._authenticate(ep)

            def elsewhere() -> T | None:
                self._rotate(ep)
                return None if again is None else again()

            return Pending(start(ep, ep.metadata), finish, elsewhere, ep.name, self.timeout)
        except grpc.RpcError as exc:
            raise mapped_error(exc, ep.name, self.timeout) from exc

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new etcd lease: ``(id, granted ttl)``; the server may raise a too-short ttl."""
        return self.run(self.grant_io(ttl))

    def grant_io(self, ttl: int) -> EtcdIo[tuple[int, int]]:
        return self._request(Method.LeaseGrant, rpc_pb2.LeaseGrantRequest(TTL=ttl), _granted, retry=True)

    def grant_started(self, ttl: int) -> Pending[tuple[int, int]]:
        return self._started(lambda ep, md: ep.lease.LeaseGrant.future(
            rpc_pb2.LeaseGrantRequest(TTL=ttl), timeout=self.timeout, metadata=md),
            lambda f: _granted(f.result()), lambda: self.grant(ttl))

    def keepalive_started(self, lease_id: int) -> Pending[int]:
        """Restart the lease's TTL; the answer is the TTL, or 0 if the lease no longer exists."""

        def finish(responses: Any) -> int:
            return _kept(next(iter(responses), None))

        # A keep-alive is not retried elsewhere: the caller hears BackendUnavailable and the
        # renewal thread tries again.
        return self._started(lambda ep, md: ep.lease.LeaseKeepAlive(
            iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self.timeout, metadata=md),
            finish, None)

    def keepalive_io(self, lease_id: int) -> EtcdIo[int]:
        return self._request(Method.LeaseKeepAlive, rpc_pb2.LeaseKeepAliveRequest(ID=lease_id), _kept,
                             retry=False, stream=True)

    def keepalives_started(self, lease_ids: list[int]) -> Pending[list[int]]:
        """``keepalive_started`` of many leases on one stream (a thread for all, not one each):
        each one's TTL restarted, in order, 0 for one that no longer exists."""
        requests = [rpc_pb2.LeaseKeepAliveRequest(ID=lease_id) for lease_id in lease_ids]
        return self._started(lambda ep, md: ep.lease.LeaseKeepAlive(iter(requests), timeout=self.timeout, metadata=md),
                             lambda responses: _kept_each(lease_ids, itertools.islice(responses, len(requests))), None)

    def keepalives_io(self, lease_ids: list[int]) -> EtcdIo[list[int]]:
        requests = [rpc_pb2.LeaseKeepAliveRequest(ID=lease_id) for lease_id in lease_ids]
        return self._request(Method.LeaseKeepAlive, requests, lambda answers: _kept_each(lease_ids, answers),
                             retry=False, stream=True)

    def time_to_live(self, lease_id: int) -> tuple[int, int]:
        """``(remaining, granted)`` seconds of a lease; remaining is -1 if it does not exist."""

        return self.run(self.time_to_live_io(lease_id))

    def time_to_live_io(self, lease_id: int) -> EtcdIo[tuple[int, int]]:
        return self._request(Method.LeaseTimeToLive, rpc_pb2.LeaseTimeToLiveRequest(ID=lease_id),
                             _lived, retry=True)

    def revoke_later(self, lease_id: int) -> None:
        """Revoke without waiting; a lease whose revoke fails runs out by itself.

        gRPC cancels a call whose future is garbage-collected, so the future is kept until
        etcd answers (and ``close`` waits for the ones still on their way).
        """
        ep = self.endpoint
        if self._closed or (ep.metadata is None and self.user is not None):
            return  # not logged in here yet; not worth a round trip
        try:
            future = ep.lease.LeaseRevoke.future(rpc_pb2.LeaseRevokeRequest(ID=lease_id), timeout=self.timeout,
                                                 metadata=ep.metadata)
        except grpc.RpcError as exc:  # best effort: the lease expires on its own
            log.debug("could not send the revoke of etcd lease %x: %s", lease_id, exc)
            return
        with self._lock:
            self._revokes.add(future)
        future.add_done_callback(self._revoked)

    def _revoked(self, future: Any) -> None:
        with self._lock:
            self._revokes.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.debug("an etcd lease revoke failed (the lease runs out by itself): %s", future.exception())

    # -- cluster -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        def run(ep: _Endpoint, md: Any) -> dict[str, Any]:
            s = ep.maintenance.Status(rpc_pb2.StatusRequest(), timeout=self.timeout, metadata=md)
            members = ep.cluster.MemberList(rpc_pb2.MemberListRequest(), timeout=self.timeout, metadata=md)
            names = {m.ID: (m.name, list(m.clientURLs)) for m in members.members}
            return {"endpoint": ep.name, "version": s.version, "db_bytes": int(s.dbSize),
                    "raft_term": int(s.raftTerm), "revision": int(s.header.revision),
                    "leader": names.get(s.leader, (hex(s.leader), []))[0],
                    "members": [{"name": n, "client_urls": u} for n, u in names.values()]}

        return self.call(run)

    def watch(self, key: bytes, end: bytes, start_revision: int) -> WatchStream:
        return self.call(lambda ep, md: WatchStream(ep, md, key, end, start_revision,
                                                    lambda: self._rotate(ep)))

    def close(self) -> None:
        """Close every channel, after the revokes already sent are answered (at most ``timeout``)."""
        self._closed = True
        deadline = time.monotonic() + self.timeout
        with self._lock:
            pending = list(self._revokes)
        for future in pending:
            # A failure is logged by _revoked; that lease runs out by itself.
            with contextlib.suppress(grpc.RpcError, grpc.FutureTimeoutError, grpc.FutureCancelledError):
                future.result(timeout=max(0.0, deadline - time.monotonic()))
        for ep in self._endpoints:
            ep.channel.close()


class Pending(Generic[T]):
    """The answer to a request already sent; ``result()`` maps errors like ``call`` does."""

    def __init__(self, started: Any, finish: Callable[[Any], T], again: Callable[[], T | None],
                 endpoint: str, timeout: float) -> None:
        self._started, self._finish, self._again = started, finish, again
        self._endpoint, self._timeout = endpoint, timeout

    def result(self) -> T:
        try:
            return self._finish(self._started)
        except grpc.RpcError as exc:
            if _retryable(exc) and (answer := self._again()) is not None:
                return answer  # from the next endpoint, asked synchronously
            raise mapped_error(exc, self._endpoint, self._timeout) from exc

    def cancel(self) -> None:
        self._started.cancel()


class AioConnection:
    """``Connection``'s requests awaited in an event loop (tenure.aio), on ``grpc.aio`` channels
    to the same endpoints: the rotation, logins (the tokens are shared), retries and error
    mapping are ``Connection``'s own generators. Built, used and closed in one running loop.

    grpc.aio rather than the blocking channels' ``.future()``: a keep-alive is a stream, which a
    blocking channel answers only to a thread that iterates it (and it starts a thread per call to
    send the request); grpc.aio serves unary calls and streams alike in the loop, no thread.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._endpoints = [_Endpoint(i, name, conn.channel(target, grpc.aio))
                           for i, (name, target) in enumerate(conn.targets)]
        self._started: set[asyncio.Task[Any]] = set()  # kept until answered: the loop holds tasks weakly
        self._closed = False

    async def run(self, io: EtcdIo[T]) -> T:
        """``io``'s requests, each awaited in the running loop (the core's driver). A request
        that ``close`` cut off is BackendUnavailable: only a caller that was itself cancelled
        gets the CancelledError."""
        try:
            return await io_drivers.run_async(io, self._answer)
        except asyncio.CancelledError:
            if self._closed and not _cancelling():
                raise BackendUnavailable("the store was closed before etcd answered") from None
            raise

    async def _answer(self, step: Effect) -> Any:
        if isinstance(step, Rpc):
            stub = self._endpoints[step.endpoint].methods[step.method]
            timeout = self.conn.timeout
            if not step.stream:
                return await stub(step.request, timeout=timeout, metadata=step.metadata)
            many = isinstance(step.request, list)  # keepalives_io: an answer each
            requests = step.request if many else [step.request]
            stream = stub(iter(requests), timeout=timeout, metadata=step.metadata)
            try:
                answers = []
                for _ in requests:
                    resp = await stream.read()  # an ended stream's error is raised here
                    if resp is grpc.aio.EOF:
                        break
                    answers.append(resp)
                return answers if many else next(iter(answers), None)
            finally:
                stream.cancel()  # answered: the rest of the stream is nothing we wait for
        if isinstance(step, Txn):
            return await self.txn(step.compares, step.success, step.failure, retry=step.retry)
        if isinstance(step, StartKeepalive):
            return await self.keepalive_started(step.lease_id)
        if isinstance(step, Range):
            return await self.range(step.key, step.end, limit=step.limit)
        if isinstance(step, Grant):
            return await self.grant(step.ttl)
        if isinstance(step, TimeToLive):
            return await self.time_to_live(step.lease_id)
        if isinstance(step, StartGrant):
            return await self.grant_started(step.ttl)
        if isinstance(step, StartKeepalives):
            return await self.keepalives_started(step.lease_ids)
        if isinstance(step, contention.Pause):
            await asyncio.sleep(step.seconds)
            return None
        return await step.result()  # an AioPending

    def _start(self, io: EtcdIo[T]) -> AioPending[T]:
        """``io`` sent now, as a task of the loop: its request goes out beside the next awaited one."""
        task = asyncio.ensure_future(self.run(io))
        self._started.add(task)
        task.add_done_callback(self._answered)
        return AioPending(task)

    def _answered(self, task: asyncio.Task[Any]) -> None:
        self._started.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an answer nobody waits for any more is no error to log

    async def txn(self, compares: list[CompareSpec], success: list[OpSpec], failure: list[OpSpec], *,
                  retry: bool = False) -> TxnResult:
        return await self.run(self.conn.txn_io(compares, success, failure, retry=retry))

    async def range(self, key: bytes, end: bytes = b"", *, limit: int = 0) -> tuple[list[KV], int, bool]:
        return await self.run(self.conn.range_io(key, end, limit=limit))

    async def grant(self, ttl: int) -> tuple[int, int]:
        return await self.run(self.conn.grant_io(ttl))

    async def time_to_live(self, lease_id: int) -> tuple[int, int]:
        return await self.run(self.conn.time_to_live_io(lease_id))

    async def grant_started(self, ttl: int) -> AioPending[tuple[int, int]]:
        return self._start(self.conn.grant_io(ttl))

    async def keepalive_started(self, lease_id: int) -> AioPending[int]:
        return self._start(self.conn.keepalive_io(lease_id))  # not retried elsewhere, as in Connection

    async def keepalives_started(self, lease_ids: list[int]) -> AioPending[list[int]]:
        return self._start(self.conn.keepalives_io(lease_ids))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._started):
            task.cancel()
        for ep in self._endpoints:
            await ep.channel.close()


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (Python 3.11+ can tell; 3.10 cannot,
    and then a cancellation that coincides with a close is taken for the close)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0


class AioPending(Generic[T]):
    """The answer to a request ``AioConnection`` started; awaited, or cancelled."""

    def __init__(self, task: asyncio.Task[T]) -> None:
        self._task = task

    async def result(self) -> T:
        """Awaited through ``AioConnection.run``, which makes a close's cancellation BackendUnavailable."""
        return await asyncio.shield(self._task)  # a cancelled waiter leaves the request to finish

    def cancel(self) -> None:
        self._task.cancel()


Effect = (Rpc | Txn | Range | Grant | TimeToLive | StartGrant | StartKeepalive | StartKeepalives
          | Pending[Any] | AioPending[Any] | contention.Pause)
EtcdIo = io_drivers.IoOf[Effect, T]  # etcd's I/O: what it yields is one of these (``_answer``)


class WatchStream:
    """Events on ``[key, end)`` from ``start_revision`` on, until ``cancel()``."""

    def __init__(self, ep: _Endpoint, md: Any, key: bytes, end: bytes, start_revision: int,
                 on_failure: Callable[[], None]) -> None:
        self._on_failure = on_failure  # the next request goes to another endpoint
        self._done = threading.Event()
        self._name = ep.name
        create = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
            key=key, range_end=end, start_revision=start_revision))

        def requests() -> Iterator[Any]:
            yield create
            self._done.wait()  # keep the stream open until cancelled

        self._call = ep.watch.Watch(requests(), metadata=md)

    def events(self) -> Iterator[list[Event]]:
        """Batches of events, one per response; raises BackendUnavailable if the stream breaks."""
        try:
            for resp in self._call:
                if resp.compact_revision:
                    raise BackendUnavailable(f"etcd compacted the watched history at {resp.compact_revision}")
                if resp.canceled:
                    raise BackendUnavailable(f"etcd cancelled the watch: {resp.cancel_reason}")
                if resp.events:
                    yield [Event(ev.type == kv_pb2.Event.DELETE, ev.kv) for ev in resp.events]
        except grpc.RpcError as exc:
            if self._done.is_set():
                return  # cancelled here, not broken
            self._on_failure()
            raise mapped_error(exc, self._name, 0) from exc

    def cancel(self) -> None:
        self._done.set()
        self._call.cancel()

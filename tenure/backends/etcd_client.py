"""The one module that imports the ``etcd3`` client and ``grpc``; everything etcd goes through it.

``etcd3`` 0.12.0 ships protobuf code generated for protobuf 3, which the C (upb) runtime of
protobuf 4 and newer refuses. The pure-Python runtime still accepts it, but it can only be
chosen before protobuf is first imported, through an environment variable. ``load()``
detects the case where that is already too late and says what to do.

Only the generated messages and stubs of ``etcd3`` are used: its client wraps one endpoint,
cannot send two requests at once and hides revisions, and tenure needs all three. gRPC
errors become tenure errors in :func:`mapped_error`, the one place that does it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tenure.core.errors import AuthenticationFailed, BackendUnavailable, LeaseError

PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
TOO_LATE = (
    "the etcd backend needs protobuf's pure-Python runtime (etcd3 0.12 ships protobuf 3 code), "
    "but protobuf was already imported with the {runtime!r} runtime in this process. "
    f"Set {PROTOBUF_ENV}=python in the environment before starting Python, or call "
    "tenure.backends.etcd_client.prepare_process() before anything imports protobuf "
    "(streamlit, grpc, google.*)."
)
T = TypeVar("T")


def prepare_process() -> None:
    """Choose protobuf's Python runtime; call it before anything imports protobuf.

    tenure's own entry points (CLI, dashboard launcher) call this first thing. It does not
    override a choice the user made explicitly.
    """
    os.environ.setdefault(PROTOBUF_ENV, "python")


_modules: tuple[Any, Any] | None = None


def load() -> tuple[Any, Any]:
    """``(grpc, etcdrpc)``, or BackendUnavailable saying how to fix the protobuf runtime."""
    global _modules
    if _modules is not None:
        return _modules
    if "google.protobuf" in sys.modules:
        from google.protobuf.internal import api_implementation  # type: ignore[import-untyped]

        runtime = api_implementation.Type()
        if runtime != "python":
            raise BackendUnavailable(TOO_LATE.format(runtime=runtime))
    else:
        prepare_process()  # nothing has loaded protobuf yet, so it is not too late
    try:
        import etcd3.etcdrpc as etcdrpc  # only when etcd is used
        import grpc
    except TypeError as exc:  # "Descriptors cannot be created directly"
        raise BackendUnavailable(TOO_LATE.format(runtime=os.environ.get(PROTOBUF_ENV, "upb"))) from exc
    _modules = (grpc, etcdrpc)
    return _modules


def mapped_error(exc: BaseException, endpoint: str, timeout: float) -> LeaseError:
    """The one place where gRPC errors become tenure errors (raise it ``from exc``)."""
    grpc, _ = load()
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code, details = exc.code(), exc.details() or ""
        lowered = details.lower()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or any(
                text in lowered for text in ("authentication failed", "user name is empty",
                                             "invalid auth token", "permission denied")):
            return AuthenticationFailed(f"etcd at {endpoint} refused the credentials: {details}")
        if "requested lease not found" in lowered:
            return LeaseNotFound(f"etcd at {endpoint}: {details}")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return BackendUnavailable(f"etcd at {endpoint} did not answer within {timeout:g}s")
        if code == grpc.StatusCode.UNAVAILABLE:
            return BackendUnavailable(f"etcd at {endpoint} is unavailable: {details}")
        return BackendUnavailable(f"etcd at {endpoint} failed the request: {code.name}: {details}")
    return BackendUnavailable(f"etcd at {endpoint}: {exc}")


def _is_rpc_error(exc: BaseException) -> bool:
    grpc, _ = load()
    return isinstance(exc, grpc.RpcError)


class LeaseNotFound(BackendUnavailable):
    """A write named an etcd lease that no longer exists; nothing was written."""


def _retryable(exc: BaseException) -> bool:
    grpc, _ = load()
    return isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and exc.code() in (
        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class KV:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class Event:
    deleted: bool
    kv: KV


def _kv(m: Any) -> KV:
    return KV(bytes(m.key), bytes(m.value), int(m.create_revision), int(m.mod_revision), int(m.lease))


# -- request builders: plain tuples, opaque to the backend ---------------------------------
# ``encode_txn`` writes a transaction's wire bytes directly: with protobuf's pure-Python
# runtime (the only one etcd3 0.12 allows) building and serializing the messages cost about
# 0.5 ms of CPU per transaction, most of the client's share of the hot path. The format is
# etcd's ``TxnRequest`` (rpc.proto); a test checks the bytes against protobuf's own.
_PUT, _DELETE, _GET, _TXN = 0, 1, 2, 3
_TARGETS = {"create": (1, 5), "mod": (2, 6), "value": (3, 7)}  # Compare target, its value field
_RESULTS = {"==": 0, ">": 1, "<": 2}  # etcd's Compare.CompareResult: EQUAL, GREATER, LESS
OpSpec = tuple[Any, ...]  # put, delete, get or compare, as built below


def put(key: bytes, value: bytes, lease: int = 0, prev_kv: bool = False) -> OpSpec:
    return (_PUT, key, value, lease, prev_kv)


def delete(key: bytes, prev_kv: bool = False) -> OpSpec:
    return (_DELETE, key, prev_kv)


def get(key: bytes, end: bytes = b"", *, keys_only: bool = False, revision: int = 0, limit: int = 0) -> OpSpec:
    return (_GET, key, end, keys_only, revision, limit)


def txn(compares: list[OpSpec], success: list[OpSpec], failure: list[OpSpec]) -> OpSpec:
    """A transaction inside a branch of another (etcd 3.3 and later)."""
    return (_TXN, compares, success, failure)


def relet(ops: list[OpSpec], old: int, new: int) -> None:
    """Point the puts in ``ops`` (nested ones too) that name etcd lease ``old`` at ``new`` instead."""
    for i, op in enumerate(ops):
        if op[0] == _PUT and op[3] == old:
            ops[i] = put(op[1], op[2], new, op[4])
        elif op[0] == _TXN:
            relet(op[2], old, new)
            relet(op[3], old, new)


def compare(key: bytes, target: str, op: str, value: int | bytes) -> OpSpec:
    """``target``: create, mod or value; ``op``: ==, <, >."""
    number, field = _TARGETS[target]
    return (key, number, _RESULTS[op], field, value)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)  # revisions and lease ids are never negative


def _encode_op(op: OpSpec) -> bytes:
    kind = op[0]
    if kind == _PUT:  # RequestOp.request_put (2): key 1, value 2, lease 3, prev_kv 4
        _, key, value, lease, prev = op
        body = _len(1, key) + (_len(2, value) if value else b"") + (_int(3, lease) if lease else b"") \
            + (b"\x20\x01" if prev else b"")
        return _len(2, body)
    if kind == _DELETE:  # request_delete_range (3): key 1, prev_kv 3
        body = _len(1, op[1]) + (b"\x18\x01" if op[2] else b"")
        return _len(3, body)
    if kind == _TXN:  # request_txn (4)
        return _len(4, encode_txn(op[1], op[2], op[3]))
    _, key, end, keys_only, revision, limit = op
    return _len(1, encode_range(key, end, limit=limit, revision=revision, keys_only=keys_only))


def encode_range(key: bytes, end: bytes = b"", *, limit: int = 0, revision: int = 0, order: int = 0,
                 target: int = 0, keys_only: bool = False) -> bytes:
    """A ``RangeRequest``: key 1, range_end 2, limit 3, revision 4, sort_order 5 (1 ascending,
    2 descending), sort_target 6 (2 create revision), keys_only 8; zeros left out, as protobuf does."""
    return (_len(1, key) + (_len(2, end) if end else b"") + (_int(3, limit) if limit else b"")
            + (_int(4, revision) if revision else b"") + (_int(5, order) if order else b"")
            + (_int(6, target) if target else b"") + (b"\x40\x01" if keys_only else b""))


def encode_txn(compares: list[OpSpec], success: list[OpSpec], failure: list[OpSpec]) -> bytes:
    """A ``TxnRequest``: compare 1, success 2, failure 3."""
    parts = []
    for key, target, result, field, value in compares:
        # Compare: result 1, target 2, key 3, then the value of the target (always sent).
        body = (_int(1, result) if result else b"") + _int(2, target) + _len(3, key) + (
            _len(field, value) if isinstance(value, bytes) else _int(field, value))
        parts.append(_len(1, body))
    parts.extend(_len(2, _encode_op(op)) for op in success)
    parts.extend(_len(3, _encode_op(op)) for op in failure)
    return b"".join(parts)


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KV]]  # one per range op of the branch that ran, in order
    prev: list[KV]  # previous values returned by put/delete with prev_kv
    nested: list[TxnResult] = dataclasses.field(default_factory=list)  # of txn ops in that branch


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result - (1 << 64) if result >= 1 << 63 else result), i  # int64
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, int or bytes)`` of one protobuf message, in wire order."""
    i, end = 0, len(buf)
    value: Any
    while i < end:
        tag, i = _read_varint(buf, i)
        wire = tag & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            size, i = _read_varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire in (1, 5):  # fixed 64 or 32 bits: none in these messages, skipped all the same
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError(f"protobuf wire type {wire} in an etcd response")
        yield tag >> 3, value


def _decode_kv(buf: bytes) -> KV:
    """``mvccpb.KeyValue``: key 1, create_revision 2, mod_revision 3, version 4, value 5, lease 6.

    Unrolled (listings decode one per job): every tag of this message fits in one byte.
    """
    key = value = b""
    create = mod = lease = 0
    i, end = 0, len(buf)
    while i < end:
        tag = buf[i]
        if tag == 0x0A or tag == 0x2A:  # key, value: length-delimited
            size, i = _read_varint(buf, i + 1)
            if tag == 0x0A:
                key = buf[i:i + size]
            else:
                value = buf[i:i + size]
            i += size
        elif tag in (0x10, 0x18, 0x20, 0x30):  # the varints
            number, i = _read_varint(buf, i + 1)
            if tag == 0x10:
                create = number
            elif tag == 0x18:
                mod = number
            elif tag == 0x30:
                lease = number
        else:  # a field this version of etcd does not send: the general reader
            f: dict[int, Any] = {1: b"", 2: 0, 3: 0, 5: b"", 6: 0}
            for number, item in _fields(buf):
                f[number] = item
            return KV(f[1], f[5], f[2], f[3], f[6])
    return KV(key, value, create, mod, lease)


def _decode_txn(buf: bytes) -> TxnResult:
    """``TxnResponse`` (header 1 with revision 3, succeeded 2, responses 3), read by hand like
    ``encode_txn`` writes requests: protobuf's Python runtime costs more than the rest."""
    revision, succeeded = 0, False
    ranges: list[list[KV]] = []
    prev: list[KV] = []
    nested: list[TxnResult] = []
    for number, value in _fields(buf):
        if number == 1:
            revision = next((v for n, v in _fields(value) if n == 3), 0)
        elif number == 2:
            succeeded = bool(value)
        elif number == 3:
            for kind, body in _fields(value):  # ResponseOp: range 1, put 2, delete_range 3
                if kind == 1:  # RangeResponse: kvs 2
                    ranges.append([_decode_kv(v) for n, v in _fields(body) if n == 2])
                elif kind == 2:  # PutResponse: prev_kv 2
                    prev.extend(_decode_kv(v) for n, v in _fields(body) if n == 2)
                elif kind == 3:  # DeleteRangeResponse: prev_kvs 3
                    prev.extend(_decode_kv(v) for n, v in _fields(body) if n == 3)
                elif kind == 4:  # TxnResponse
                    nested.append(_decode_txn(body))
    return TxnResult(succeeded, revision, ranges, prev, nested)


def decode_range(buf: bytes) -> tuple[list[KV], int, bool]:
    """``RangeResponse`` (header 1 with revision 3, kvs 2, more 3) as ``(kvs, revision, more)``."""
    revision, more = 0, False
    kvs = []
    for number, value in _fields(buf):
        if number == 2:
            kvs.append(_decode_kv(value))
        elif number == 1:
            revision = next((v for n, v in _fields(value) if n == 3), 0)
        elif number == 3:
            more = bool(value)
    return kvs, revision, more


# Pings on open streams (watches) notice a frozen server; etcd refuses pings under 5 s apart.
_CHANNEL_OPTIONS = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                    # A listing's walk of every job key in one answer (etcd_scan.scan): 1,000,000
                    # keys of 30 bytes are about 40 MB, past gRPC's default 4 MB.
                    ("grpc.max_receive_message_length", 512 * 1024 * 1024)]


class _Endpoint:
    def __init__(self, conn: Connection, host: str, port: int) -> None:
        grpc, rpc = load()
        self.name = f"{host}:{port}"
        target = f"[{host}]:{port}" if ":" in host else self.name
        if conn.ca_cert is None:
            self.channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        else:
            creds = grpc.ssl_channel_credentials(_read(conn.ca_cert), _read(conn.cert_key),
                                                 _read(conn.cert_cert))
            self.channel = grpc.secure_channel(target, creds, options=_CHANNEL_OPTIONS)
        # Txn in bytes both ways (``encode_txn``, ``_decode_txn``): no protobuf messages.
        self.txn = self.channel.unary_unary("/etcdserverpb.KV/Txn")
        self.range = self.channel.unary_unary("/etcdserverpb.KV/Range")  # likewise: listings
        self.lease = rpc.LeaseStub(self.channel)
        self.watch = rpc.WatchStub(self.channel)
        self.cluster = rpc.ClusterStub(self.channel)
        self.maintenance = rpc.MaintenanceStub(self.channel)
        self.auth = rpc.AuthStub(self.channel)
        self.metadata: tuple[tuple[str, str], ...] | None = None


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


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
        self.ca_cert, self.cert_cert, self.cert_key = ca_cert, cert_cert, cert_key
        self._endpoints = [_Endpoint(self, h, p) for h, p in hosts]
        self._current = 0
        self._lock = threading.Lock()
        self._closed = False

    @property
    def endpoint(self) -> _Endpoint:
        return self._endpoints[self._current]

    def _authenticate(self, ep: _Endpoint) -> None:
        _, rpc = load()
        resp = ep.auth.Authenticate(rpc.AuthenticateRequest(name=self.user, password=self.password),
                                    timeout=self.timeout)
        ep.metadata = (("token", resp.token),)

    def call(self, fn: Callable[[_Endpoint, tuple[tuple[str, str], ...] | None], T], *,
             retry: bool = True) -> T:
        """Run ``fn(endpoint, metadata)``, moving to the next endpoint if this one is unreachable."""
        if self._closed:
            raise BackendUnavailable("this etcd store is closed")
        attempts = len(self._endpoints) if retry else 1
        for attempt in range(attempts):
            ep = self.endpoint
            try:
                if self.user is not None and ep.metadata is None:
                    self._authenticate(ep)
                try:
                    return fn(ep, ep.metadata)
                except Exception as exc:
                    # Simple auth tokens expire (5 minutes by default): log in again once.
                    if self.user is None or "invalid auth token" not in str(exc):
                        raise
                    self._authenticate(ep)
                    return fn(ep, ep.metadata)
            except Exception as exc:
                if not _is_rpc_error(exc):
                    raise  # tenure's own errors, and bugs, pass through unchanged
                if not _retryable(exc):
                    raise mapped_error(exc, ep.name, self.timeout) from exc
                self._rotate(ep)
                if attempt == attempts - 1:
                    raise mapped_error(exc, ep.name, self.timeout) from exc
        raise AssertionError("unreachable")

    def _rotate(self, failed: _Endpoint) -> None:
        with self._lock:
            if self.endpoint is failed:
                self._current = (self._current + 1) % len(self._endpoints)

    # -- KV --------------------------------------------------------------------------------
    def txn(self, compares: list[OpSpec], success: list[OpSpec], failure: list[OpSpec], *,
            retry: bool = False) -> TxnResult:
        req = encode_txn(compares, success, failure)
        return self.call(lambda ep, md: _decode_txn(ep.txn(req, timeout=self.timeout, metadata=md)),
                         retry=retry)

    def range(self, key: bytes, end: bytes = b"", *, revision: int = 0, limit: int = 0,
              newest_first: bool = False, by_create: bool = False,
              keys_only: bool = False) -> tuple[list[KV], int, bool]:
        """Keys in ``[key, end)`` as ``(kvs, revision read at, more)``."""
        req = encode_range(key, end, limit=limit, revision=revision, order=2 if newest_first else 1,
                           target=2 if by_create else 0, keys_only=keys_only)
        return self.call(lambda ep, md: decode_range(ep.range(req, timeout=self.timeout, metadata=md)))

    # -- leases ----------------------------------------------------------------------------
    def _started(self, start: Callable[[_Endpoint, Any], Any], finish: Callable[[Any], T],
                 again: Callable[[], T] | None) -> Pending[T]:
        """Send a request now and collect its answer later, without a thread of our own."""
        if self._closed:
            raise BackendUnavailable("this etcd store is closed")
        ep = self.endpoint
        try:
            if self.user is not None and ep.metadata is None:
                self._authenticate(ep)
            def elsewhere() -> T | None:
                self._rotate(ep)
                return None if again is None else again()

            return Pending(start(ep, ep.metadata), finish, elsewhere, ep.name, self.timeout)
        except Exception as exc:
            if not _is_rpc_error(exc):
                raise
            raise mapped_error(exc, ep.name, self.timeout) from exc

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new etcd lease: ``(id, granted ttl)``; the server may raise a too-short ttl."""
        _, rpc = load()
        return self.call(lambda ep, md: _granted(ep.lease.LeaseGrant(
            rpc.LeaseGrantRequest(TTL=ttl), timeout=self.timeout, metadata=md)))

    def grant_started(self, ttl: int) -> Pending[tuple[int, int]]:
        _, rpc = load()
        return self._started(lambda ep, md: ep.lease.LeaseGrant.future(
            rpc.LeaseGrantRequest(TTL=ttl), timeout=self.timeout, metadata=md),
            lambda f: _granted(f.result()), lambda: self.grant(ttl))

    def keepalive_started(self, lease_id: int) -> Pending[int]:
        """Restart the lease's TTL; the answer is the TTL, or 0 if the lease no longer exists."""
        _, rpc = load()

        def finish(responses: Any) -> int:
            for resp in responses:
                return int(resp.TTL)
            return 0

        # A keep-alive is not retried elsewhere: the caller hears BackendUnavailable and the
        # renewal thread tries again.
        return self._started(lambda ep, md: ep.lease.LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self.timeout, metadata=md),
            finish, None)

    def time_to_live(self, lease_id: int) -> tuple[int, int]:
        """``(remaining, granted)`` seconds of a lease; remaining is -1 if it does not exist."""
        _, rpc = load()

        def run(ep: _Endpoint, md: Any) -> tuple[int, int]:
            resp = ep.lease.LeaseTimeToLive(rpc.LeaseTimeToLiveRequest(ID=lease_id),
                                            timeout=self.timeout, metadata=md)
            return int(resp.TTL), int(resp.grantedTTL)

        return self.call(run)

    def revoke_later(self, lease_id: int) -> None:
        """Revoke without waiting; a lease that is not revoked runs out by itself."""
        _, rpc = load()
        ep = self.endpoint
        if ep.metadata is None and self.user is not None:
            return  # not logged in here yet; not worth a round trip
        try:
            ep.lease.LeaseRevoke.future(rpc.LeaseRevokeRequest(ID=lease_id), timeout=self.timeout,
                                        metadata=ep.metadata)
        except Exception:  # best effort: the lease expires on its own
            return

    # -- cluster -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        _, rpc = load()

        def run(ep: _Endpoint, md: Any) -> dict[str, Any]:
            s = ep.maintenance.Status(rpc.StatusRequest(), timeout=self.timeout, metadata=md)
            members = ep.cluster.MemberList(rpc.MemberListRequest(), timeout=self.timeout, metadata=md)
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
        self._closed = True
        for ep in self._endpoints:
            ep.channel.close()


def _granted(resp: Any) -> tuple[int, int]:
    if resp.error:
        raise BackendUnavailable(f"etcd refused a lease: {resp.error}")
    return int(resp.ID), int(resp.TTL)


class Pending(Generic[T]):
    """The answer to a request already sent; ``result()`` maps errors like ``call`` does."""

    def __init__(self, started: Any, finish: Callable[[Any], T], again: Callable[[], T | None],
                 endpoint: str, timeout: float) -> None:
        self._started, self._finish, self._again = started, finish, again
        self._endpoint, self._timeout = endpoint, timeout

    def result(self) -> T:
        try:
            return self._finish(self._started)
        except LeaseError:
            raise
        except Exception as exc:
            if not _is_rpc_error(exc):
                raise
            if _retryable(exc) and (answer := self._again()) is not None:
                return answer  # from the next endpoint, asked synchronously
            raise mapped_error(exc, self._endpoint, self._timeout) from exc

    def cancel(self) -> None:
        self._started.cancel()


class WatchStream:
    """Events on ``[key, end)`` from ``start_revision`` on, until ``cancel()``."""

    def __init__(self, ep: _Endpoint, md: Any, key: bytes, end: bytes, start_revision: int,
                 on_failure: Callable[[], None]) -> None:
        _, rpc = load()
        self._on_failure = on_failure  # the next request goes to another endpoint
        self._done = threading.Event()
        self._name = ep.name
        create = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
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
                    yield [Event(ev.type == 1, _kv(ev.kv)) for ev in resp.events]
        except LeaseError:
            raise
        except Exception as exc:
            if self._done.is_set():
                return  # cancelled here, not broken
            if not _is_rpc_error(exc):
                raise
            self._on_failure()
            raise mapped_error(exc, self._name, 0) from exc

    def cancel(self) -> None:
        self._done.set()
        self._call.cancel()

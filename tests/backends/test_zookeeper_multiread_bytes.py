"""zookeeper_multiread builds ZooKeeper requests with kazoo's private serializers; kazoo is
capped below its next major for that reason, and this checks the bytes against kazoo's own
multi (``Transaction``) and against the Jute layout, so a kazoo release that changes them fails
here rather than in production."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest

serialization = pytest.importorskip("kazoo.protocol.serialization")
exceptions = pytest.importorskip("kazoo.exceptions")
from devservers.zookeeper import ZooKeeperServer  # noqa: E402
from tenure.backends.zookeeper.multiread import MultiRead  # noqa: E402

PATHS = ["/tenure/jobs/a", "/tenure/jobs/ünï", "/x"]


def test_request_bytes_match_kazoos_own_multi() -> None:
    ops = [serialization.GetData(p, None) for p in PATHS]
    ours = bytes(MultiRead(PATHS).serialize())
    assert ours == bytes(serialization.Transaction(ops).serialize())
    # And spelled out in Jute: per op a header (type 4, done false, err -1), the path, watch false;
    # then the closing header (type -1, done true, err -1).
    expected = b"".join(struct.pack("!iBi", 4, 0, -1) + struct.pack("!i", len(p.encode())) + p.encode() + b"\0"
                        for p in PATHS) + struct.pack("!iBi", -1, 1, -1)
    assert ours == expected
    assert MultiRead.type == 22  # ZooDefs.OpCode.multiRead


def test_answers_decode_from_kazoos_structs() -> None:
    stat = serialization.stat_struct.pack(1, 2, 3, 4, 7, 0, 0, 0, 5, 0, 9)  # version 7
    answer = (serialization.multiheader_struct.pack(4, False, 0) + serialization.int_struct.pack(3) + b"abc" + stat
              + serialization.multiheader_struct.pack(-1, False, -101) + serialization.int_struct.pack(-101)
              + serialization.multiheader_struct.pack(4, False, 0) + serialization.int_struct.pack(-1) + stat
              + serialization.multiheader_struct.pack(-1, True, -1))
    first, missing, empty = MultiRead([]).deserialize(answer, 0)
    assert first == (b"abc", 7)
    assert isinstance(missing, exceptions.NoNodeError)
    assert empty == (b"", 7)
    version_field = serialization.ZnodeStat._fields.index("version")
    assert serialization.ZnodeStat._make(serialization.stat_struct.unpack(stat))[version_field] == 7


def test_a_server_without_multiread_is_read_one_get_at_a_time(
        zk_server: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server before 3.6 answers a multiRead with UnimplementedError (injected here on the
    # first request, as such a server would): the rest is read with pipelined gets, in order,
    # by the streaming and the gathering reads alike.
    from kazoo.client import KazooClient

    from tenure.backends.zookeeper import calls, multiread

    client = KazooClient(hosts=zk_server.hosts)
    client.start()
    try:
        root = f"/multiread-{time.time_ns()}"
        paths = [f"{root}/n{i:03d}" for i in range(7)]
        for i, path in enumerate(paths):
            client.create(path, f"v{i}".encode(), makepath=True)
        wanted = [(p, f"v{i}".encode(), 0) for i, p in enumerate(paths)]
        missing = [*paths[:3], f"{root}/gone", *paths[3:]]  # a znode that is not there is skipped
        assert list(multiread.read_many(client, missing, 10.0, batch=2)) == wanted
        send = multiread._send

        def old_server(c: Any, chunk: list[str], stats: bool = False) -> Any:
            result = c.handler.async_result()
            result.set_exception(exceptions.UnimplementedError())
            return result

        monkeypatch.setattr(multiread, "_send", old_server)
        assert list(multiread.read_many(client, missing, 10.0, batch=2)) == wanted
        assert calls.run(multiread.reading_many(client, missing, batch=2), 10.0) == wanted
        monkeypatch.setattr(multiread, "_send", send)
    finally:
        client.stop()
        client.close()

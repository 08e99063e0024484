"""zookeeper_multiread builds ZooKeeper requests with kazoo's private serializers; kazoo is
capped below its next major for that reason, and this checks the bytes against kazoo's own
multi (``Transaction``) and against the Jute layout, so a kazoo release that changes them fails
here rather than in production."""

from __future__ import annotations

import struct

import pytest

serialization = pytest.importorskip("kazoo.protocol.serialization")
exceptions = pytest.importorskip("kazoo.exceptions")
from tenure.backends.zookeeper.multiread import MultiRead  # noqa: E402

PATHS = ["/tenure/jobs/a", "/tenure/jobs/ünï", "/x"]


def test_request_bytes_match_kazoos_own_multi() -> None:
    ops = [serialization.GetData(p, None) for p in PATHS]
    ours = bytes(MultiRead(ops).serialize())
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

"""No password or ZooKeeper digest ever appears in an error, a log line or CLI output.

A mistyped URL can put a password anywhere (a missing ``@``, a stray ``&``, a ``/`` inside it),
so each URL below holds a secret in a different wrong place; none may be echoed back.
"""

from __future__ import annotations

import logging

import pytest

import tenure
from tenure.cli import main

PASSWORD = "HUNTER2"
DIGEST = "D1GESTpw"  # the password half of a ZooKeeper digest identity, reader=name:password

MALFORMED = [
    f"etcd://root:{PASSWORD}@h:2379/p?password={PASSWORD}&&x=1",  # the example
    f"etcd://h:2379/p?password={PASSWORD}&&x=1",
    f"etcd://h/p?user=root&password={PASSWORD}&user=again",
    f"etcd://root:{PASSWORD}/p@h:2379",  # a '/' in the password: no '@' before the path
    f"etcd://root:{PASSWORD}?@h:2379/p",  # a '?' in the password: it lands in the query
    f"etcd//root:{PASSWORD}@h:2379/p",  # no '://' at all
    f"zk://h:2181/r?reader=bob:{DIGEST}&{DIGEST}",
    f"zk://u:{PASSWORD}@h:2181/r?reader=bob:{DIGEST}&session_timeout={DIGEST}",  # the half alone
    f"zk://h:2181/r?username=u&password={PASSWORD}&retention={PASSWORD}",
    f"zk://h:2181/r?password&{PASSWORD}",
    f"zk://h:2181/r?username=u&password={PASSWORD}&session_timeout={PASSWORD}",
    f"memory://u:{PASSWORD}@x?drift_margin={PASSWORD}",
    f"sqlite://u:{PASSWORD}@host/x.db",
]


def _assert_clean(text: str) -> None:
    assert PASSWORD not in text and DIGEST not in text, text


@pytest.mark.parametrize("url", MALFORMED)
def test_no_secret_in_errors_logs_or_cli_output(url: str, caplog: pytest.LogCaptureFixture,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(tenure.LeaseError) as info:
        tenure.connect(url)
    _assert_clean(f"{info.value} {info.value!r} {info.value.__cause__!r} {info.value.__context__!r}")
    assert main(["--url", url, "ls"]) != 0
    out, err = capsys.readouterr()
    _assert_clean(out + err)
    assert err.startswith("tenure: ")  # the error is still reported, only without the secret
    _assert_clean(caplog.text)


"""Backends by URL scheme: built-ins, a third-party entry point, and install hints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tenure
import tenure.testing
from tenure.backends.memory import MemoryBackend

ROOT = Path(__file__).resolve().parents[2]


class ThirdPartyBackend(MemoryBackend):
    """Stands in for a package that registers ``thirdparty://`` in the entry-point group."""


def test_a_backend_registered_by_entry_point_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "tenure_thirdparty-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tenure-thirdparty\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[tenure.backends]\nthirdparty = tests.core.test_registry:ThirdPartyBackend\n"
        "notabackend = tests.core.test_registry:ROOT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with tenure.connect("thirdparty://x") as store:
        assert isinstance(store.backend, ThirdPartyBackend)
        store.submit("j")
        assert store.get("j") is not None
    with pytest.raises(tenure.InvalidArgument, match=r"is not a tenure\.Backend"):
        tenure.connect("notabackend://x")
    with pytest.raises(tenure.InvalidArgument, match=r"known: .*thirdparty"):
        tenure.connect("unheard-of://x")


def test_a_backend_registered_at_run_time_is_found_and_repeated_in_children() -> None:
    tenure.register_backend("thirdparty-cls", ThirdPartyBackend)
    tenure.register_backend("thirdparty-spec", "tests.core.test_registry:ThirdPartyBackend")  # imported on first use
    for scheme in ("thirdparty-cls", "thirdparty-spec"):
        with tenure.connect(f"{scheme}://x") as store:
            assert isinstance(store.backend, ThirdPartyBackend)
    code = ("import tenure\nfrom tenure.testing.processes import adopt_registrations\nadopt_registrations()\n"
            "print(type(tenure.connect('thirdparty-cls://y').backend).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=tenure.testing.child_environment())
    assert done.stdout.strip() == "ThirdPartyBackend", done.stderr


def test_a_bad_registration_is_refused_and_a_spec_checked_when_used() -> None:
    tenure.register_backend("thirdparty-root", "tests.core.test_registry:ROOT")
    with pytest.raises(tenure.InvalidArgument, match=r"is not a tenure\.Backend"):
        tenure.connect("thirdparty-root://x")
    for scheme, backend, why in (("sqlite", ThirdPartyBackend, "built-in"), ("Bad Scheme", ThirdPartyBackend, "scheme"),
                                 ("ok", "no colon", "spec"), ("ok", dict, "tenure.Backend subclass"),
                                 (7, ThirdPartyBackend, "scheme")):
        with pytest.raises(tenure.InvalidArgument, match=why):
            tenure.register_backend(scheme, backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("url, module, extra", [("etcd://127.0.0.1:1/p", "grpc", "etcd"),
                                                 ("zk://127.0.0.1:1/c", "kazoo", "zookeeper"),
                                                 ("postgresql://127.0.0.1:1/db", "psycopg", "postgres"),
                                                 ("postgres://127.0.0.1:1/db", "psycopg_pool", "postgres")])
def test_a_missing_client_library_names_the_extra(url: str, module: str, extra: str) -> None:
    code = (f"import sys; sys.modules[{module!r}] = None\n"  # as if the library were not installed
            "import tenure\n"
            "try:\n"
            f"    tenure.connect({url!r})\n"
            "except tenure.BackendUnavailable as exc:\n"
            "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert f"pip install 'tenure[{extra}]'" in done.stdout, done.stdout + done.stderr


class OtherBackend(MemoryBackend):
    """A second package's backend that wants a scheme already taken."""


def test_a_registered_scheme_is_replaced_only_when_asked() -> None:
    tenure.register_backend("thirdparty-taken", ThirdPartyBackend)
    tenure.register_backend("thirdparty-taken", "tests.core.test_registry:ThirdPartyBackend")  # the same backend again
    with pytest.raises(tenure.InvalidArgument,
                       match=r"already registered to tests\.core\.test_registry:ThirdPartyBackend; pass replace=True"):
        tenure.register_backend("thirdparty-taken", OtherBackend)
    with tenure.connect("thirdparty-taken://x") as store:
        assert type(store.backend) is ThirdPartyBackend  # the refused registration changed nothing
    tenure.register_backend("thirdparty-taken", OtherBackend, replace=True)
    with tenure.connect("thirdparty-taken://x") as store:
        assert type(store.backend) is OtherBackend


def _made_here(tag: int) -> type[MemoryBackend]:
    class Made(MemoryBackend):  # each call: another class of the same name (_made_here.<locals>.Made)
        TAG = tag
    return Made


def test_another_class_of_the_same_name_is_another_backend() -> None:
    first, second = _made_here(1), _made_here(2)
    tenure.register_backend("thirdparty-named", first)
    try:
        with pytest.raises(tenure.InvalidArgument, match=r"\(another class of that name\); pass replace=True"):
            tenure.register_backend("thirdparty-named", second)
        with tenure.connect("thirdparty-named://x") as store:
            assert store.backend.TAG == 1  # type: ignore[attr-defined]
    finally:  # child processes of later tests register every scheme by name: leave one they can import
        tenure.register_backend("thirdparty-named", ThirdPartyBackend, replace=True)


def test_replace_must_be_a_bool() -> None:
    tenure.register_backend("thirdparty-flag", ThirdPartyBackend)
    with pytest.raises(tenure.InvalidArgument, match="replace must be a bool, not str"):
        tenure.register_backend("thirdparty-flag", MemoryBackend, replace="no")  # type: ignore[arg-type]
    with tenure.connect("thirdparty-flag://x") as store:
        assert type(store.backend) is ThirdPartyBackend

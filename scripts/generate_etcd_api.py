"""Generate tenure's etcd API modules from tenure/backends/etcd/api/*.proto.

    python scripts/generate_etcd_api.py            # rewrite the committed modules
    python scripts/generate_etcd_api.py --check    # exit 1 if they differ from a fresh run

The ``*_pb2.py`` modules are edited after protoc to build their descriptors in a pool of
their own (see ``_EDITS``). Needs grpcio-tools at the version pinned in pyproject.toml's dev extra: the output names
the protobuf and grpcio versions it was generated with, and other versions write other bytes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path("tenure/backends/etcd/api")
PROTOS = ("kv.proto", "rpc.proto")
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def outputs() -> list[Path]:
    """The generated files, relative to the repository root."""
    return [PACKAGE / (Path(proto).stem + suffix) for proto in PROTOS for suffix in SUFFIXES]


def generate(out: Path) -> None:
    """Write the generated files under ``out`` (as ``out/tenure/backends/etcd/api/...``)."""
    from grpc_tools import protoc  # a development tool only: the library never imports it

    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    # Paths relative to the repository root, so the modules import each other by their
    # package path and name their .proto files by it (unique in protobuf's descriptor pool).
    args = ["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *(str(PACKAGE / proto) for proto in PROTOS)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for proto in PROTOS:
        _use_private_pool(out / PACKAGE / (Path(proto).stem + "_pb2.py"))


# protoc adds every file to protobuf's default descriptor pool, which holds one definition per
# full name in a process: another etcd client's generated code (python-etcd3, cslab-etcd3 ...)
# defines etcdserverpb.* and mvccpb.* too, and the second to load failed with "duplicate
# symbol". tenure's modules add their files to a pool of their own instead; the names (and so
# the gRPC paths) stay etcd's.
_EDITS = (
    ("from google.protobuf.internal import builder as _builder\n",
     "from google.protobuf.internal import builder as _builder\n"
     "from tenure.backends.etcd.api import POOL as _POOL  # edited by scripts/generate_etcd_api.py\n"),
    ("DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(", "DESCRIPTOR = _POOL.AddSerializedFile("),
)


def _use_private_pool(module: Path) -> None:
    text = module.read_text(encoding="utf-8")
    for old, new in _EDITS:
        if text.count(old) != 1:  # protoc's output changed: look again before editing it
            raise SystemExit(f"{module}: expected {old!r} once")
        text = text.replace(old, new)
    module.write_text(text, encoding="utf-8")


def differences() -> list[str]:
    """The generated files whose committed text differs from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [str(path) for path in outputs()
                if not (ROOT / path).is_file() or (ROOT / path).read_bytes() != (Path(tmp) / path).read_bytes()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with a fresh generation, change nothing")
    if parser.parse_args().check:
        stale = differences()
        for path in stale:
            print(f"out of date: {path}", file=sys.stderr)
        return 1 if stale else 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The one module that imports the ``etcd3`` client; everything etcd-specific goes through it.

``etcd3`` 0.12.0 ships protobuf code generated for protobuf 3, which the C (upb) runtime of
protobuf 4 and newer refuses. The pure-Python runtime still accepts it, but it can only be
chosen before protobuf is first imported, through an environment variable.
"""

from __future__ import annotations

import os

PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def prepare_process() -> None:
    """Choose protobuf's Python runtime; call it before anything imports protobuf.

    tenure's own entry points (CLI, dashboard launcher) call this first thing. It does not
    override a choice the user made explicitly.
    """
    os.environ.setdefault(PROTOBUF_ENV, "python")

"""The one JSON shape of every record tenure hands out, shared by the CLI and the dashboard.

A record becomes an object with one key per dataclass field; enums become their value, store
times stay seconds since the epoch, and bytes (a job's result) become text when they are UTF-8
and ``{"base64": "..."}`` otherwise, so a script reading either export sees the same thing.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Iterable
from typing import Any


def plain(value: Any) -> Any:
    """A JSON-friendly copy of a record, or of a list or dict of them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def to_json(value: Any, indent: int | None = 2) -> str:
    """One JSON document: a record, or a list of them."""
    return json.dumps(plain(value), indent=indent, ensure_ascii=False)


def to_jsonl(records: Iterable[Any]) -> str:
    """One record per line (JSON Lines), for streams and ``jq -c``."""
    return "\n".join(json.dumps(plain(r), ensure_ascii=False) for r in records)

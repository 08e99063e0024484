"""The one normal form of a request path: the default fence key of an HTTP request, and the path
a signature is bound to (see ``http`` and ``binding``)."""

from __future__ import annotations

import re
import unicodedata

from tenure.core import validation
from tenure.core.errors import InvalidArgument, quoted

_STILL_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


def normal_path(path: str, root_path: str = "") -> str:
    """The one spelling of a request path that names its fence: ``InvalidArgument`` if there is none.

    The mount prefix (``root_path``) is dropped, whether or not the server left it in ``path``
    (ASGI servers differ); Unicode is composed (NFC); empty segments (``//``, a trailing slash)
    are dropped and a backslash counts as a slash. Dot segments and text still percent-encoded
    after the server's one decoding (``%252F``) are refused: servers and apps resolve them
    differently. Two spellings merged into one key can only refuse more, never admit more.
    """
    root = root_path.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    path = unicodedata.normalize("NFC", path).replace("\\", "/")
    if _STILL_ENCODED.search(path):
        raise InvalidArgument(f"request path {quoted(path)} is still percent-encoded after decoding")
    segments = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in segments):
        raise InvalidArgument(f"request path {quoted(path)} has '.' or '..' segments")
    return validation.resource("/" + "/".join(segments))

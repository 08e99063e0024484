"""Credentials sent without TLS: found once, at connect, from the URL and options alone.

A backend declares in ``Characteristics.tls_options`` which options turn TLS on (None: it
sends nothing over a network): ``name`` for an option any true value of which encrypts, or
``name=value`` for the one value that does (libpq's ``sslmode=prefer`` and ``allow`` fall back
to clear text, so only ``require``, ``verify-ca`` and ``verify-full`` count). A password, or a
ZooKeeper digest identity, given without one of them would cross the network in clear text:
``connect`` warns (``InsecureTransportWarning`` and a log line, never the secret) and the
store's health says so, for the dashboard.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

from tenure.core.backend import Characteristics
from tenure.core.options import StoreURL

CREDENTIAL_OPTIONS = ("password", "reader")  # reader=name:password is a ZooKeeper digest identity
_OFF = ("", "0", "false", "no", "off")

log = logging.getLogger("tenure.transport")


class InsecureTransportWarning(UserWarning):
    """A password or digest will be sent to the store without TLS."""


def cleartext_credentials(traits: Characteristics, url: StoreURL, options: Mapping[str, Any]) -> str | None:
    """What would be sent in clear text, in words, or None when nothing would."""
    if traits.tls_options is None:
        return None
    sent = (["the URL's password"] if url.password else []) + [
        f"option {name}" for name in CREDENTIAL_OPTIONS if _on(options.get(name))]
    if not sent or any(_encrypts(options, option) for option in traits.tls_options):
        return None
    how = f" (TLS needs {' or '.join(traits.tls_options)})" if traits.tls_options else " (it has no TLS)"
    return f"{' and '.join(sent)} sent to {traits.name} without TLS{how}"


def warn(problem: str) -> None:
    log.warning("insecure store connection: %s", problem)
    warnings.warn(f"insecure store connection: {problem}", InsecureTransportWarning, stacklevel=3)


def _encrypts(options: Mapping[str, Any], option: str) -> bool:
    name, equals, wanted = option.partition("=")
    given = options.get(name)
    if equals:
        return given is not None and str(given).strip() == wanted
    return _on(given)


def _on(value: object) -> bool:
    return value is not None and value is not False and str(value).strip().lower() not in _OFF

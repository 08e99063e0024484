"""Credentials sent without TLS: found once, at connect, from the URL and options alone.

A backend declares in ``Characteristics.tls_options`` which options turn TLS on (None: it
sends nothing over a network): ``name`` for an option any true value of which encrypts, or
``name=value`` for the one value that does (libpq's ``sslmode=prefer`` and ``allow`` fall back
to clear text, so only ``require``, ``verify-ca`` and ``verify-full`` count). A password, or a
ZooKeeper digest identity, given without one of them would cross the network in clear text:
``connect`` warns (``InsecureTransportWarning`` and a log line, never the secret) and the
store's health says so, for the dashboard. Settings a client library takes from the
environment when the URL does not give them (libpq's ``PGSSLMODE``, ``PGPASSWORD``) count as
given: ``Characteristics.environment`` names them.
"""

from __future__ import annotations

import logging
import os
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


def cleartext_credentials(traits: Characteristics, url: StoreURL, options: Mapping[str, Any],
                          environ: Mapping[str, str] = os.environ) -> str | None:
    """What would be sent in clear text, in words, or None when nothing would."""
    if traits.tls_options is None:
        return None
    implied = {option: (var, environ[var]) for var, option in traits.environment if environ.get(var)}
    given = {**{option: value for option, (_, value) in implied.items()}, **options}
    sent = ["the URL's password"] if url.password else []
    for name in CREDENTIAL_OPTIONS:
        if name in options and _on(options[name]):
            sent.append(f"option {name}")
        elif name in implied and not (name == "password" and url.password):
            sent.append(f"{implied[name][0]} from the environment")
    if not sent or any(_encrypts(given, option) for option in traits.tls_options):
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

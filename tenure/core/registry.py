"""Backends by URL scheme: a lazy table of built-ins plus the ``tenure.backends`` entry points.

A third-party backend registers ``myscheme = mypackage.module:MyBackend`` in the
``tenure.backends`` entry-point group; its class subclasses ``tenure.Backend``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from tenure.core import transport
from tenure.core.backend import Backend
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, InvalidArgument, quoted
from tenure.core.holding import MAX_DRIFT_MARGIN
from tenure.core.options import Options, StoreURL, parse_url
from tenure.core.store import DEFAULT_DRIFT_MARGIN, Store

# scheme -> (module, class, extra that installs its client library)
BUILTIN: dict[str, tuple[str, str, str | None]] = {
    "memory": ("tenure.backends.memory", "MemoryBackend", None),
    "sqlite": ("tenure.backends.sqlite", "SQLiteBackend", None),
    "etcd": ("tenure.backends.etcd", "EtcdBackend", "etcd"),
    "zk": ("tenure.backends.zookeeper", "ZooKeeperBackend", "zookeeper"),
    "zookeeper": ("tenure.backends.zookeeper", "ZooKeeperBackend", "zookeeper"),
    "postgresql": ("tenure.backends.postgres", "PostgresBackend", "postgres"),
    "postgres": ("tenure.backends.postgres", "PostgresBackend", "postgres"),
}
ENTRY_POINT_GROUP = "tenure.backends"


def backend_class(scheme: str) -> type[Backend]:
    if scheme in BUILTIN:
        module_name, class_name, extra = BUILTIN[scheme]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if extra is None or (exc.name or "").startswith("tenure"):
                raise
            raise BackendUnavailable(
                f"the {scheme}:// backend needs {exc.name!r}: pip install 'tenure[{extra}]'") from exc
        cls: type[Backend] = getattr(module, class_name)
        return cls
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == scheme:
            loaded = ep.load()
            if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
                raise InvalidArgument(f"entry point {ep.value} for {scheme}:// is not a tenure.Backend")
            return loaded
    known = sorted(set(BUILTIN) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
    raise InvalidArgument(f"unknown store scheme {quoted(scheme)}; known: {', '.join(known)}")


@dataclass(frozen=True)
class Opened:
    """A backend built from a URL and what its store needs besides: one parsing for both flavours."""

    backend: Backend
    clock: Clock | None  # injected (tests), or None for the system clock
    drift_margin: float
    url: str  # redacted: safe to show
    warnings: tuple[str, ...]


def open_backend(url: str, options: dict[str, Any],
                 build: Callable[[type[Backend], StoreURL, Options, Clock | None], Backend] | None = None) -> Opened:
    """Parse ``url`` and ``options`` and build the backend of its scheme.

    ``build`` builds another kind of backend from the same parsed URL and options (the
    asyncio flavour's); by default the registered class's ``from_url``.
    """
    options = dict(options)
    parsed = parse_url(url)
    cls = backend_class(parsed.scheme)
    clock = options.pop("clock", None)
    cleartext = transport.cleartext_credentials(cls.characteristics, parsed, {**parsed.query, **options})
    opts = Options(parsed.query, options, where=f"{parsed.scheme}://", secrets=(parsed.password,))
    drift = opts.number("drift_margin", DEFAULT_DRIFT_MARGIN, low=0.0, high=MAX_DRIFT_MARGIN)
    backend = cls.from_url(parsed, opts, clock) if build is None else build(cls, parsed, opts, clock)
    assert drift is not None
    if cleartext is not None:
        transport.warn(cleartext)
    notes = () if cleartext is None else (cleartext,)
    return Opened(backend, clock, drift, parsed.redacted(), notes)


def connect(url: str, **options: Any) -> Store:
    """Open a store: ``memory://``, ``sqlite:///jobs.db``, ``etcd://h:2379/prefix``, ``zk://h:2181/chroot``.

    Options come from the URL query string; keyword arguments override them. ``clock``
    injects a clock (tests); ``drift_margin`` is the fraction of each TTL a holder gives up
    to clock-rate drift when it computes its safe local deadline.
    """
    o = open_backend(url, options)
    if o.clock is None:
        return Store(o.backend, drift_margin=o.drift_margin, url=o.url, warnings=o.warnings)
    return Store(o.backend, clock=o.clock, drift_margin=o.drift_margin, url=o.url, warnings=o.warnings)

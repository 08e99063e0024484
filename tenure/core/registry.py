"""Backends by URL scheme: a lazy table of built-ins plus the ``tenure.backends`` entry points.

A third-party backend registers ``myscheme = mypackage.module:MyBackend`` in the
``tenure.backends`` entry-point group; its class subclasses ``tenure.Backend``. A program (or
a test) can also register one at run time: ``tenure.register_backend("myscheme", MyBackend)``
or ``tenure.register_backend("myscheme", "mypackage.module:MyBackend")``, imported on first use.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from tenure.core import transport
from tenure.core.backend import Backend
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, InvalidArgument, quoted
from tenure.core.holding import MAX_DRIFT_MARGIN
from tenure.core.lifecycle import DEFAULT as DEFAULT_LIFECYCLE
from tenure.core.lifecycle import Lifecycle
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
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,31}")  # RFC 3986's scheme characters, lower case
_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # "package.module:Class.Nested"
# Registered at run time: a class, or a "module:Class" spec not imported yet. Entries win over
# entry points of the same name (a test registers what it is about to test), never over built-ins.
_REGISTERED: dict[str, type[Backend] | str] = {}
_REGISTERED_LOCK = threading.Lock()


def register_backend(scheme: str, backend: type[Backend] | str, *, replace: bool = False) -> None:
    """Make ``scheme://`` URLs open ``backend``: a ``tenure.Backend`` subclass, or ``"module:Class"``.

    A spec string is imported on the first ``connect()`` of that scheme, so registering costs
    nothing until used. Registering the same backend again changes nothing; another backend for
    a scheme already registered is refused unless ``replace=True`` (two packages claiming one
    scheme is a mistake to hear about, not to settle by import order). A built-in scheme cannot
    be replaced.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise InvalidArgument(f"a backend scheme must be 1 to 32 of a-z, 0-9, '+', '.', '-' starting with "
                              f"a letter, not {quoted(scheme) if isinstance(scheme, str) else type(scheme).__name__}")
    if scheme in BUILTIN:
        raise InvalidArgument(f"{scheme}:// is a built-in backend and cannot be replaced")
    if isinstance(backend, str):
        if not _SPEC.fullmatch(backend):
            raise InvalidArgument(f"a backend spec must look like 'package.module:Class', not {quoted(backend)}")
    elif not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise InvalidArgument(f"the backend for {scheme}:// must be a tenure.Backend subclass or a "
                              f"'module:Class' string, not {type(backend).__name__}")
    if not isinstance(replace, bool):
        raise InvalidArgument(f"replace must be a bool, not {type(replace).__name__}")
    with _REGISTERED_LOCK:
        earlier = _REGISTERED.get(scheme)
        if earlier is not None and not replace:
            if _same(earlier, backend):
                return
            namesake = " (another class of that name)" if _spec_of(earlier) == _spec_of(backend) else ""
            raise InvalidArgument(f"{scheme}:// is already registered to {_spec_of(earlier)}{namesake}; "
                                  "pass replace=True to register another backend for it")
        _REGISTERED[scheme] = backend


def _same(earlier: type[Backend] | str, backend: type[Backend] | str) -> bool:
    """Two classes are the same backend only if they are one class (classes made in a function
    share a name); a spec string names the class it imports."""
    if isinstance(earlier, type) and isinstance(backend, type):
        return earlier is backend
    return _spec_of(earlier) == _spec_of(backend)


def _spec_of(backend: type[Backend] | str) -> str:
    return backend if isinstance(backend, str) else f"{backend.__module__}:{backend.__qualname__}"


def registered_backends() -> dict[str, str]:
    """Every run-time registration as ``"module:Class"``, to repeat it in another process."""
    with _REGISTERED_LOCK:
        entries = dict(_REGISTERED)
    return {scheme: _spec_of(b) for scheme, b in entries.items()}


def _load_spec(scheme: str, spec: str) -> type[Backend]:
    module_name, _, attribute = spec.partition(":")
    loaded: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        loaded = getattr(loaded, part)
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        raise InvalidArgument(f"{spec} registered for {scheme}:// is not a tenure.Backend")
    with _REGISTERED_LOCK:
        if _REGISTERED.get(scheme) == spec:
            _REGISTERED[scheme] = loaded  # imported once
    return loaded


def backend_class(scheme: str) -> type[Backend]:
    registered = _REGISTERED.get(scheme)
    if isinstance(registered, str):
        return _load_spec(scheme, registered)
    if registered is not None:
        return registered
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
    known = sorted(set(BUILTIN) | set(_REGISTERED) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
    raise InvalidArgument(f"unknown store scheme {quoted(scheme)}; known: {', '.join(known)}")


@dataclass(frozen=True)
class Opened:
    """A backend built from a URL and what its store needs besides: one parsing for both flavours."""

    backend: Backend
    clock: Clock | None  # injected (tests), or None for the system clock
    drift_margin: float
    url: str  # redacted: safe to show
    warnings: tuple[str, ...]
    lifecycle: Lifecycle = DEFAULT_LIFECYCLE


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
    lifecycle = Lifecycle.from_options(opts)
    backend = cls.from_url(parsed, opts, clock) if build is None else build(cls, parsed, opts, clock)
    assert drift is not None
    if cleartext is not None:
        transport.warn(cleartext)
    notes = () if cleartext is None else (cleartext,)
    return Opened(backend, clock, drift, parsed.redacted(), notes, lifecycle)


def connect(url: str, **options: Any) -> Store:
    """Open a store: ``memory://``, ``sqlite:///jobs.db``, ``etcd://h:2379/prefix``, ``zk://h:2181/chroot``.

    Options come from the URL query string; keyword arguments override them. ``clock``
    injects a clock (tests); ``drift_margin`` is the fraction of each TTL a holder gives up
    to clock-rate drift when it computes its safe local deadline.
    """
    o = open_backend(url, options)
    if o.clock is None:
        return Store(o.backend, drift_margin=o.drift_margin, url=o.url, warnings=o.warnings, lifecycle=o.lifecycle)
    return Store(o.backend, clock=o.clock, drift_margin=o.drift_margin, url=o.url, warnings=o.warnings,
                 lifecycle=o.lifecycle)

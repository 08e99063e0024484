"""Options of ``zk://`` URLs and the ACLs and kazoo arguments they turn into (kazoo's errors
become tenure's in ``errors``).

Credentials come from the URL (``zk://user:pass@host/root``) or the ``username``/``password``
keyword arguments. With credentials, every znode tenure creates is writable by that identity
only; ``reader=name:password`` adds a read-only identity (a dashboard), and a root found open
is refused at connect unless ``repair_acl=true`` (``acl``). Without credentials
znodes are open to anyone, as ZooKeeper's own default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from tenure.backends.zookeeper.layout import root_path
from tenure.core.errors import InvalidArgument
from tenure.core.options import Options, StoreURL

DEFAULT_PORT = 2181


def _identity(text: str | None, option: str) -> tuple[str, str] | None:
    if text is None:
        return None
    name, colon, password = text.partition(":")
    if not name or not colon:
        raise InvalidArgument(f"option {option} must look like name:password")
    return name, password


@dataclass(frozen=True)
class Config:
    hosts: str
    root: str
    session_timeout: float = 10.0
    timeout: float = 10.0
    retention: int = 10_000
    auth: tuple[str, str] | None = field(default=None, repr=False)
    reader: tuple[str, str] | None = field(default=None, repr=False)
    tls: dict[str, Any] = field(default_factory=dict)
    repair_acl: bool = False  # set this identity's ACL on a root found open (acl)
    create: bool = True  # false: a root without tenure's jobs/ is StoreNotFound, nothing created

    @classmethod
    def from_url(cls, url: StoreURL, options: Options) -> Config:
        if not url.hosts:
            raise InvalidArgument("a zk:// URL needs at least one host: zk://host:2181/root")
        hosts = ",".join(f"[{h}]:{p or DEFAULT_PORT}" if ":" in h else f"{h}:{p or DEFAULT_PORT}"
                         for h, p in url.hosts)
        username = options.text("username", url.username)
        password = options.text("password", url.password)
        if (username is None) != (password is None):
            raise InvalidArgument("ZooKeeper digest authentication needs both a username and a password")
        auth = None if username is None or password is None else (username, password)
        reader = _identity(options.text("reader"), "reader")
        if reader and not auth:
            raise InvalidArgument("option reader needs credentials for the writing identity too")
        session = options.number("session_timeout", 10.0, low=0.2, high=600.0)
        timeout = options.number("timeout", 10.0, low=0.0, high=600.0, low_open=True)
        tls: dict[str, Any] = {}
        if options.boolean("tls", False):
            tls = {"use_ssl": True, "verify_certs": options.boolean("verify_certs", True),
                   "ca": options.text("ca"), "certfile": options.text("certfile"),
                   "keyfile": options.text("keyfile"), "keyfile_password": options.text("keyfile_password")}
        else:
            leftover = [n for n in ("verify_certs", "ca", "certfile", "keyfile", "keyfile_password")
                        if options.raw(n) is not None]
            if leftover:
                raise InvalidArgument(f"option(s) {', '.join(leftover)} need tls=true")
        retention = options.integer("retention", 10_000, low=1, high=1_000_000)
        repair_acl = options.boolean("repair_acl", False)
        create = options.boolean("create", True)
        if repair_acl and not auth:
            raise InvalidArgument("option repair_acl needs credentials: without them znodes are open by design")
        options.finish()
        assert session is not None and timeout is not None
        return cls(hosts, root_path(url.path), session, timeout, retention, auth, reader, tls, repair_acl, create)

    def acl(self) -> list[ACL]:
        """ACL of every znode this client creates."""
        if self.auth is None:
            return list(OPEN_ACL_UNSAFE)
        acl = [make_digest_acl(*self.auth, all=True)]
        if self.reader is not None:
            acl.append(make_digest_acl(*self.reader, read=True))
        return acl

    def clocks_acl(self) -> list[ACL]:
        """Anyone may add a clock znode (a reader needs one to read the store's time)."""
        if self.auth is None:
            return list(OPEN_ACL_UNSAFE)
        return [*self.acl(), make_acl("world", "anyone", create=True)]

    def client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "hosts": self.hosts, "timeout": self.session_timeout, "default_acl": self.acl(),
            # Reconnect forever in the background; each request is bounded by ``timeout``.
            "connection_retry": {"max_tries": -1, "delay": 0.05, "max_delay": 1.0},
            "command_retry": {"max_tries": 0},
            **self.tls,
        }
        if self.auth is not None:
            kwargs["auth_data"] = [("digest", f"{self.auth[0]}:{self.auth[1]}")]
        return kwargs

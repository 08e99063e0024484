"""With credentials, a root that anyone can change is refused at connect (or repaired):
whoever may delete a ``gen/`` znode resets tokens, whoever may write ``jobs/`` forges records
(docs/backends/zookeeper.md, "Security"). The root and its directories may grant
``world:anyone`` no more than tenure does (CREATE on ``clocks/``); ``repair_acl=true`` sets
this identity's ACL on every znode below them but other clients' clock znodes. Other
identities an operator added are left alone.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL, Permissions

from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.session import Session
from tenure.core.errors import InvalidArgument

log = logging.getLogger("tenure.zookeeper")
_BATCH = 1000  # requests in flight while repairing


def open_entries(acl: list[ACL], expected: list[ACL]) -> list[str]:
    """What ``acl`` grants ``world:anyone`` beyond ``expected``, e.g. ``["world:anyone:CDRWA"]``."""
    allowed = {(e.id.scheme, e.id.id): e.perms for e in expected}
    extra = [(e.id, e.perms & ~allowed.get((e.id.scheme, e.id.id), 0)) for e in acl if e.id.scheme == "world"]
    return [f"{who.scheme}:{who.id}:{_letters(perms)}" for who, perms in extra if perms]


def _letters(perms: int) -> str:
    return "".join(letter for bit, letter in ((Permissions.CREATE, "C"), (Permissions.DELETE, "D"),
                                              (Permissions.READ, "R"), (Permissions.WRITE, "W"),
                                              (Permissions.ADMIN, "A")) if perms & bit)


class Guard:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._layout = session.layout
        self._config = session.config

    def expected(self, path: str) -> list[ACL]:
        return self._config.clocks_acl() if path == self._layout.clocks else self._config.acl()

    def check(self, paths: tuple[str, ...]) -> None:
        """Refuse (or repair) open ACLs on those of ``paths`` that exist; a no-op without
        credentials, whose znodes are open by design."""
        if self._config.auth is None:
            return
        client = self._session.client
        with mapped_errors("reading the root's ACLs"):
            pending = [(path, client.get_acls_async(path)) for path in paths]
            found: dict[str, list[str]] = {}
            existing = []
            for path, result in pending:
                try:
                    acl, _ = self._session.wait(result)
                except NoNodeError:
                    continue
                except NoAuthError:
                    continue  # not readable by this identity (nor by anyone): its operations fail
                existing.append(path)
                if bad := open_entries(acl, self.expected(path)):
                    found[path] = bad
        if not found:
            return
        if not self._config.repair_acl:
            listed = "; ".join(f"{path} grants {', '.join(bad)}" for path, bad in found.items())
            raise InvalidArgument(
                f"ZooKeeper root {self._layout.root} is open to anyone ({listed}): anyone could "
                "reset tokens or forge records. Set its ACLs, or connect with repair_acl=true to "
                "give every znode under it this identity's ACL")
        count = self._repair(existing)
        log.warning("ZooKeeper root %s had open ACLs; set this identity's ACL on %d znodes",
                    self._layout.root, count)

    def _repair(self, directories: list[str]) -> int:
        client = self._session.client
        count = 0
        with mapped_errors("repairing the root's ACLs"):
            paths = self._below(directories)
            while batch := list(itertools.islice(paths, _BATCH)):
                pending = [client.set_acls_async(path, self.expected(path)) for path in batch]
                for result in pending:
                    try:
                        self._session.wait(result)
                        count += 1
                    except NoNodeError:
                        continue  # deleted meanwhile
        return count

    def _below(self, directories: list[str]) -> Iterator[str]:
        """The directories and every znode under them, level by level, except the clock
        znodes (ephemeral, other clients' own)."""
        client = self._session.client
        level = directories
        while level:
            yield from level
            parents = [p for p in level if p != self._layout.clocks and p != self._layout.root]
            pending = [(p, client.get_children_async(p)) for p in parents]
            level = []
            for parent, result in pending:
                try:
                    level.extend(f"{parent}/{name}" for name in self._session.wait(result))
                except NoNodeError:
                    continue

"""ZooKeeper digest ACLs for the nodes canal-server creates (canal.zookeeper.auth).

Without ACLs every znode is world-writable: anyone who reaches ZooKeeper can rewrite ``{dest}/running`` and
send every client of the destination to an address of their choosing, or move a consumer's cursor. With
``canal.zookeeper.auth = user:password`` each client authenticates with ZooKeeper's ``digest`` scheme and
every node it creates gets ``digest:user:hash`` with all permissions plus ``world:anyone`` read, so Canal's own
tooling and clients still read the nodes (discovery needs nothing more) while only holders of the credentials
change them. Nodes made before the key was set are brought under the same ACL at server start
(``secure_tree``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, make_acl, make_digest_acl

log = logging.getLogger(__name__)

AUTH_KEY = "canal.zookeeper.auth"


@dataclass(frozen=True)
class ZkAuth:
    """Digest credentials: ``user:password`` (the password may contain ':')."""

    user: str
    password: str = ""

    def __post_init__(self) -> None:
        if not self.user or not self.password or ":" in self.user:
            raise ValueError(f"{AUTH_KEY} must be user:password (both non-empty, no ':' in the user)")

    @classmethod
    def parse(cls, text: str) -> ZkAuth:
        user, _, password = text.partition(":")
        return cls(user, password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        return [make_digest_acl(self.user, self.password, all=True), make_acl("world", "anyone", read=True)]

    def __repr__(self) -> str:  # never the password in a log line or a traceback
        return f"ZkAuth(user={self.user!r}, password='***')"


def secure_tree(zk: KazooClient, acl: list[ACL], roots: Iterable[str] = ("/otter",)) -> int:
    """Set ``acl`` on every existing node under ``roots`` whose ACL differs; returns how many changed. A node
    created by another ACL user, or an open node someone has since locked, raises kazoo's NoAuthError: the
    server must not run with meta it cannot protect."""
    wanted = sorted(acl, key=repr)
    changed = 0
    stack = list(roots)
    while stack:
        path = stack.pop()
        try:
            current, stat = zk.get_acls(path)
            if sorted(current, key=repr) != wanted:
                zk.set_acls(path, acl, version=stat.aversion)
                changed += 1
            if stat.ephemeralOwner == 0:
                stack.extend(f"{path.rstrip('/')}/{child}" for child in zk.get_children(path))
        except NoNodeError:
            continue  # gone meanwhile (an ephemeral node, a removed batch)
    if changed:
        log.info("ZooKeeper: %s set on %d existing node(s) under %s", AUTH_KEY, changed, ", ".join(roots))
    return changed

"""The server's side of Canal's client authentication: canal.user / canal.passwd and the check of a
ClientAuth (the scramble itself is in ``canal_core.protocol.auth``)."""

from __future__ import annotations

from ..protocol.auth import HASH_LEN, check_scramble
from ..protocol.errors import CanalError


class AuthConfigError(CanalError, ValueError):
    """canal.user / canal.passwd cannot work together (a startup error, as in Canal)."""


def check_server_credentials(user: str, passwd: str) -> None:
    """Canal refuses to start with canal.user set and canal.passwd empty: it would look protected but
    accept any password for that user."""
    if user and not passwd:
        raise AuthConfigError(f"canal.user = {user} needs canal.passwd (the hex SHA1(SHA1(password)); "
                              "leave both empty for no authentication)")
    if passwd:
        try:
            ok = len(bytes.fromhex(passwd)) == HASH_LEN
        except ValueError:
            ok = False
        if not ok:
            raise AuthConfigError("canal.passwd must be 40 hex digits: upper(sha1(unhex(sha1(password))))")


class Authenticator:
    """The server's check of a ClientAuth, with Canal's rules:

    - canal.user empty or equal to the client's username: with canal.passwd empty anything is accepted;
      with canal.passwd set an empty client password is refused, any other must match the scramble;
    - canal.user set and different from the client's username: refused.
    """

    def __init__(self, user: str = "", passwd: str = "") -> None:
        check_server_credentials(user, passwd)
        self.user = user
        self.passwd = passwd.upper()

    @property
    def enabled(self) -> bool:
        return bool(self.passwd)

    def authenticate(self, username: str, password: str, seed: bytes) -> bool:
        """``password``: ClientAuth.password decoded as UTF-8 (the hex token)."""
        if self.user and self.user != username:
            return False
        if not self.passwd:
            return True
        if not password:
            return False
        return check_scramble(password, seed, self.passwd)

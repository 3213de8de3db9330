"""Where canal-binlog takes a live server's address, user and password from.

Each setting comes from the first of: its own flag (--host, --port, --user, --password), the --url, the
--defaults-file (groups [client] and [canal-binlog]), then the default; the password last from
$CANAL_BINLOG_PASSWORD. A password given on the command line (--password VALUE, or inside --url) is visible to
every user of the machine in the process list, so it is still accepted but warned about; ``--password``
without a value asks for it on the terminal.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..protocol.errors import CanalError
from .optionfile import OptionFileError, read_option_file

PASSWORD_ENV = "CANAL_BINLOG_PASSWORD"
OPTION_GROUPS = ("client", "canal-binlog")
ASK = object()  # --password given without a value: ask on the terminal


class LoginError(CanalError, ValueError):
    """A --url, --defaults-file or port that cannot be used (a usage error)."""


@dataclass
class ServerLogin:
    host: str | None = None
    port: int = 3306
    user: str = "canal"
    password: str = ""
    warnings: list[str] = field(default_factory=list)


def resolve_login(*, url: str | None, host: str | None, port: int | None, user: str | None,
                  password: str | object | None, defaults_file: str | None, use_file_host: bool = True,
                  environ: dict[str, str] | None = None) -> ServerLogin:
    """The settings from the sources above. ``use_file_host``: whether a host in the option file counts (not
    when binlog files are read and no server is asked anything)."""
    env = os.environ if environ is None else environ
    from_url = _from_url(url) if url else {}
    from_file: dict[str, str] = {}
    if defaults_file:
        try:
            from_file = read_option_file(defaults_file, OPTION_GROUPS)
        except OptionFileError as e:
            raise LoginError(f"--defaults-file: {e}") from None
    login = ServerLogin()
    login.host = host or from_url.get("host") or (from_file.get("host") if use_file_host else None) or None
    if port is not None:
        login.port = port
    elif "port" in from_url:
        login.port = int(from_url["port"])
    elif "port" in from_file:
        login.port = _file_port(from_file["port"], defaults_file or "")
    login.user = user or from_url.get("user") or from_file.get("user") or "canal"
    if password is ASK:
        login.password = getpass.getpass(f"Enter password for {login.user}@{login.host}: ")
    elif isinstance(password, str):
        login.password = password
        login.warnings.append(_exposed("--password"))
    elif "password" in from_url:
        login.password = from_url["password"]
        login.warnings.append(_exposed("--url"))
    elif "password" in from_file:
        login.password = from_file["password"]
    else:
        login.password = env.get(PASSWORD_ENV, "")
    return login


def _exposed(flag: str) -> str:
    return (f"a password in {flag} can be read by every user of this machine (ps, /proc); give it in "
            f"${PASSWORD_ENV}, in a --defaults-file ([client] password=...), or as --password without a value "
            f"to be asked for it")


def _from_url(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("mysql", "mariadb") or not parts.hostname:
        raise LoginError(f"--url {_masked(url)!r} is not of the form mysql://user@host:port")
    out = {"host": parts.hostname}
    try:
        if parts.port is not None:
            out["port"] = str(parts.port)
    except ValueError:
        raise LoginError(f"--url {_masked(url)!r} has a bad port") from None
    if parts.username:
        out["user"] = unquote(parts.username)
    if parts.password is not None:
        out["password"] = unquote(parts.password)
    return out


def _masked(url: str) -> str:
    """The URL as it may be printed: its password replaced."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{netloc[1]}").geturl()


def _file_port(text: str, path: str) -> int:
    v = int(text) if text.isdigit() else 0
    if not 0 < v < 65536:
        raise LoginError(f"--defaults-file {path}: port {text!r} is not a port number 1..65535")
    return v

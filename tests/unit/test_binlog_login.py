"""canal-binlog's server settings: a password from an option file or the environment stays out of the process
list; one given on the command line still works but is warned about."""

from __future__ import annotations

from pathlib import Path

import pytest

from canal_core.binlog_cli.command import main
from canal_core.binlog_cli.optionfile import OptionFileError, read_option_file
from canal_core.binlog_cli.server_login import ASK, LoginError, resolve_login
from tests.support.net import free_port

GROUPS = ("client", "canal-binlog")


def option_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "my.cnf"
    path.write_text(text)
    path.chmod(mode)
    return path


def login(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {"url": None, "host": None, "port": None, "user": None, "password": None,
                               "defaults_file": None, "environ": {}}
    args.update(kw)
    return resolve_login(**args)  # type: ignore[arg-type]


def test_option_file_in_mysql_format(tmp_path: Path) -> None:
    path = option_file(tmp_path, """
# a comment
; another
[mysqld]
password = not-this-one
[client]
host=db.example
PORT = 3307
user = repl
password = "s3cr#t \\"quoted\\""   # comment after a quoted value
[mysql]
user = not-this-one
[canal-binlog]
ssl_mode = DISABLED
compress
""")
    assert read_option_file(path, GROUPS) == {"host": "db.example", "port": "3307", "user": "repl",
                                              "password": 's3cr#t "quoted"', "ssl-mode": "DISABLED",
                                              "compress": ""}


def test_option_file_unquoted_values_end_at_a_comment_and_take_escapes(tmp_path: Path) -> None:
    path = option_file(tmp_path, "[client]\npassword = pass\\sword # comment\npassword='last wins'\n")
    assert read_option_file(path, GROUPS) == {"password": "last wins"}
    path = option_file(tmp_path, "[client]\npassword = a\\\\b\\tc\n")
    assert read_option_file(path, GROUPS)["password"] == "a\\b\tc"


@pytest.mark.parametrize(("text", "message"), [
    ("password=x\n", r"my.cnf:1: an option before any \[group\] line"),
    ("[client]\n!include /etc/other.cnf\n", r"my.cnf:2: !include is not supported"),
    ("[client\n", r"my.cnf:1: a group line must be \[name\]"),
    ("[client]\npassword='open\n", r"my.cnf:2: a quoted value without its closing '"),
    ("[client]\npassword='a' b\n", r"my.cnf:2: text after the closing quote"),
])
def test_option_file_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(OptionFileError, match=message):
        read_option_file(option_file(tmp_path, text), GROUPS)


def test_world_writable_option_file_is_refused(tmp_path: Path) -> None:
    path = option_file(tmp_path, "[client]\nhost=elsewhere\n", mode=0o666)
    with pytest.raises(OptionFileError, match="world-writable; make it private"):
        read_option_file(path, GROUPS)


def test_missing_option_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(LoginError, match=r"--defaults-file: cannot read option file .*nope\.cnf"):
        login(defaults_file=str(tmp_path / "nope.cnf"))


def test_password_sources_in_order(tmp_path: Path) -> None:
    env = {"CANAL_BINLOG_PASSWORD": "from-env"}
    assert login(host="h", environ=env).password == "from-env"
    path = str(option_file(tmp_path, "[client]\npassword=from-file\nuser=fileuser\nhost=filehost\nport=3400\n"))
    got = login(defaults_file=path, environ=env)
    assert (got.host, got.port, got.user, got.password, got.warnings) == ("filehost", 3400, "fileuser",
                                                                          "from-file", [])
    got = login(url="mysql://urluser:from-url@urlhost:3401", defaults_file=path, environ=env)
    assert (got.host, got.port, got.user, got.password) == ("urlhost", 3401, "urluser", "from-url")
    got = login(url="mysql://urluser:from-url@urlhost:3401", host="h", port=1, user="u", password="from-flag",
                defaults_file=path, environ=env)
    assert (got.host, got.port, got.user, got.password) == ("h", 1, "u", "from-flag")


def test_a_password_on_the_command_line_is_warned_about() -> None:
    for kw in ({"url": "mysql://canal:canal@127.0.0.1:3306"}, {"host": "h", "password": "canal"}):
        warnings = login(**kw).warnings
        assert len(warnings) == 1 and "can be read by every user of this machine" in warnings[0], warnings
        assert "CANAL_BINLOG_PASSWORD" in warnings[0] and "--defaults-file" in warnings[0]
    assert login(url="mysql://canal@127.0.0.1:3306", environ={"CANAL_BINLOG_PASSWORD": "x"}).warnings == []


def test_password_without_a_value_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or "typed")
    got = login(host="db", user="repl", password=ASK)
    assert got.password == "typed" and got.warnings == [] and prompts == ["Enter password for repl@db: "]


def test_option_file_host_is_not_a_server_for_local_files(tmp_path: Path) -> None:
    path = str(option_file(tmp_path, "[client]\nhost=db\n"))
    assert login(defaults_file=path, use_file_host=False).host is None


def test_cli_warns_once_and_never_prints_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["--url", f"mysql://canal:hunter22@127.0.0.1:{port}"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("canal-binlog: warning: a password in --url can be read by every user"), lines
    assert lines[1].startswith(f"canal-binlog: error: cannot connect to 127.0.0.1:{port}"), lines
    assert len(lines) == 2 and "hunter22" not in "\n".join(lines)


def test_cli_takes_the_server_from_an_option_file_without_a_warning(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    path = option_file(tmp_path, f"[client]\nhost=127.0.0.1\nport={port}\nuser=canal\npassword=hunter22\n")
    assert main(["--defaults-file", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"canal-binlog: error: cannot connect to 127.0.0.1:{port}"), lines

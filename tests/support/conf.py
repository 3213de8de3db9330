"""Canal configuration directories for tests that start an instance or a server."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_conf(root: Path, canal: str, instances: Mapping[str, str]) -> Path:
    """``root/conf``: canal.properties holding the ``canal`` lines, and destination name -> its
    instance.properties lines (see ``source``)."""
    conf = root / "conf"
    conf.mkdir(parents=True)
    (conf / "canal.properties").write_text(canal)
    for name, lines in instances.items():
        (conf / name).mkdir()
        (conf / name / "instance.properties").write_text(lines)
    return conf


def source(mysql_port: int, regex: str) -> str:
    """instance.properties lines reading the private MariaDB on ``mysql_port`` as the replication user canal, for
    the tables the filter ``regex`` (a Canal filter: dots escaped as ``\\\\.``) names."""
    return (f"canal.instance.master.address = 127.0.0.1:{mysql_port}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
            f"canal.instance.filter.regex = {regex}\n")

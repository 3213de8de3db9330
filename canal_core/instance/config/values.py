"""The value types of configuration keys that are not plain text, numbers or booleans."""

from __future__ import annotations

import enum
from typing import NamedTuple


class ServerMode(enum.StrEnum):
    TCP = "tcp"
    KAFKA = "kafka"
    ROCKETMQ = "rocketMQ"
    RABBITMQ = "rabbitMQ"
    PULSARMQ = "pulsarMQ"


class InstanceMode(enum.StrEnum):
    SPRING = "spring"
    MANAGER = "manager"


class SslMode(enum.StrEnum):
    DISABLED = "DISABLED"
    PREFERRED = "PREFERRED"
    REQUIRED = "REQUIRED"
    VERIFY_CA = "VERIFY_CA"
    VERIFY_IDENTITY = "VERIFY_IDENTITY"


class MetaMode(enum.StrEnum):
    """Which meta manager canal.instance.global.spring.xml (or canal.instance.{name}.spring.xml) selects."""

    MEMORY = "memory"  # memory-instance.xml
    FILE_MIXED = "file-mixed"  # file-instance.xml: memory + meta.dat flushed every canal.file.flush.period ms
    PERIOD_MIXED = "period-mixed"  # default-instance.xml: memory + ZooKeeper every canal.zookeeper.flush.period
    GROUP = "group"  # group-instance.xml: several sources (canal.instance.masterN.*) merged into one


SPRING_XML = {
    "memory-instance.xml": MetaMode.MEMORY,
    "file-instance.xml": MetaMode.FILE_MIXED,
    "default-instance.xml": MetaMode.PERIOD_MIXED,
    "group-instance.xml": MetaMode.GROUP,
}


def meta_mode_for(spring_xml: str) -> MetaMode | None:
    """``classpath:spring/file-instance.xml`` (or just the file name) -> MetaMode; None if unknown."""
    name = spring_xml.strip()
    if name.startswith("classpath:"):
        name = name[len("classpath:"):]
    return SPRING_XML.get(name.replace("\\", "/").rsplit("/", 1)[-1])


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


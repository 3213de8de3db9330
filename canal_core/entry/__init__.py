"""Canal's Entry model: conversion of decoded binlog events into entries (``convert``; column texts in
``columns``, row image bytes in ``rowdata`` and ``rowcodegen``) and the ``CanalEntry`` wrapper that carries the
serialized entry together with its position and the typed rows (``model``). The protobuf definitions are in
``canal_core.protocol``."""

from .columns import JavaTypes
from .convert import EntryConverter, classify_query
from .model import (
    ENTRY_GTIDLOG,
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)

__all__ = [
    "ENTRY_GTIDLOG",
    "ENTRY_HEARTBEAT",
    "ENTRY_ROWDATA",
    "ENTRY_TRANSACTIONBEGIN",
    "ENTRY_TRANSACTIONEND",
    "CanalEntry",
    "EntryConverter",
    "JavaTypes",
    "classify_query",
]

"""Every typed error canal_core raises on purpose is a CanalError, and keeps the builtin base callers catch."""

from __future__ import annotations

import pytest

from canal_core.binlog.errors import BinlogError, ChecksumError
from canal_core.binlog_cli.optionfile import OptionFileError
from canal_core.binlog_cli.server_login import LoginError
from canal_core.client.connector import CanalAuthError, CanalClientError
from canal_core.client.zookeeper import ServerAddressError
from canal_core.meta.errors import BatchOrderError, CanalMetaError, MetaStoreError
from canal_core.meta.zkfence import FencedError
from canal_core.mysql.errors import ReplicationAuthError, ReplicationError
from canal_core.parse.filter import FilterConfigError
from canal_core.parse.model import SchemaHistoryError, UnknownTableError
from canal_core.parse.position import PositionStoreError
from canal_core.parse.start_errors import StartPositionError, TimestampTooOldError
from canal_core.protocol.codec import ProtocolError
from canal_core.protocol.errors import CanalError
from canal_core.protocol.zkpaths import InvalidDestinationError
from canal_core.server.auth import AuthConfigError
from canal_core.server.embedded import CanalServerError, SubscriptionFilterError
from canal_core.sink.group import SinkClosedError
from canal_core.store.ring import StoreClosed, StoreError


@pytest.mark.parametrize("cls", [
    BinlogError, ChecksumError, ReplicationError, ReplicationAuthError, SchemaHistoryError, UnknownTableError,
    StartPositionError, TimestampTooOldError, PositionStoreError, FilterConfigError, CanalMetaError,
    BatchOrderError, MetaStoreError, FencedError, StoreError, StoreClosed, SinkClosedError, CanalServerError,
    SubscriptionFilterError, AuthConfigError, ProtocolError, CanalClientError, CanalAuthError,
    ServerAddressError, InvalidDestinationError, OptionFileError, LoginError,
])
def test_typed_errors_share_the_root(cls: type[Exception]) -> None:
    assert issubclass(cls, CanalError)


@pytest.mark.parametrize(("cls", "builtin"), [
    (StoreError, RuntimeError), (FilterConfigError, ValueError), (AuthConfigError, ValueError),
    (ServerAddressError, ValueError), (InvalidDestinationError, ValueError), (OptionFileError, ValueError),
    (LoginError, ValueError),
])
def test_typed_errors_keep_their_builtin_base(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, builtin)

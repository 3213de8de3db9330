"""Errors of the meta layer. ``str(error)`` is Canal's own text, verbatim, because clients (and the people
who search for these messages) know them: the TCP server will send them back unchanged."""

from __future__ import annotations

from ..protocol.errors import CanalError


class CanalMetaError(CanalError):
    """Base of every meta error (Canal's CanalMetaManagerException / the meta-related CanalServerException)."""


class BatchOrderError(CanalMetaError):
    """An ack or rollback named an outstanding batch that is not the oldest one.

    Canal refuses it (MemoryClientIdentityBatch.removePositionRange): acking out of order could move the
    cursor past rows the client never confirmed.
    """

    def __init__(self, batch_id: int, first_id: int) -> None:
        self.batch_id = batch_id
        self.first_id = first_id
        super().__init__(f"batchId:{batch_id} is not the firstly:{first_id}")


class BatchNotExistError(CanalMetaError):
    """An ack or rollback named a batch id that is not outstanding (already acked, rolled back, or never
    handed out). ``operation`` is "ack" or "rollback": Canal words the two differently."""

    def __init__(self, operation: str, client_id: int, batch_id: int) -> None:
        self.operation = operation
        self.client_id = client_id
        self.batch_id = batch_id
        if operation == "ack":
            text = f"ack error , clientId:{client_id} batchId:{batch_id} is not exist , please check"
        else:
            text = f"rollback error, clientId:{client_id} batchId:{batch_id} is not exist , please check"
        super().__init__(text)


class NotSubscribedError(CanalMetaError):
    """get/ack by a client that has not subscribed (Canal's checkSubscribe)."""

    def __init__(self, client: object) -> None:
        self.client = client
        super().__init__(f"ClientIdentity:{client} should subscribe first")


class MetaStoreError(CanalMetaError):
    """meta.dat (or later ZooKeeper) could not be read or written; the text names the place."""

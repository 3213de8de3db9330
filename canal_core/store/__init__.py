"""Event store between the sink and the consumers: Canal's bounded memory ring (``ring``)."""

from .ring import (
    CANCEL_POLL,
    DDL_EVENT_TYPES,
    DEFAULT_BUFFER_SIZE,
    DEFAULT_MEM_UNIT,
    KEY_BATCH_MODE,
    KEY_BUFFER_SIZE,
    KEY_DDL_ISOLATION,
    KEY_MEM_UNIT,
    Batch,
    BatchMode,
    MemoryEventStore,
    StoreClosed,
    StoredEvent,
    StoreError,
    StoreStats,
)

__all__ = [
    "CANCEL_POLL",
    "DDL_EVENT_TYPES",
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_MEM_UNIT",
    "KEY_BATCH_MODE",
    "KEY_BUFFER_SIZE",
    "KEY_DDL_ISOLATION",
    "KEY_MEM_UNIT",
    "Batch",
    "BatchMode",
    "MemoryEventStore",
    "StoreClosed",
    "StoreError",
    "StoreStats",
    "StoredEvent",
]

"""Canal's meta layer: client subscriptions, cursors and outstanding batches, with Canal's rules, JSON and
error texts. See manager.py (interface, memory), file.py (file-mixed), zookeeper.py (zookeeper), period_mixed.py
(period-mixed), zkposition.py (parse position), zkfence.py (the fence), election.py (running-node election),
ledger.py (get/ack/rollback rules), compare.py (cursor ordering)."""

from .compare import compare_positions, journal_key, min_position
from .errors import BatchNotExistError, BatchOrderError, CanalMetaError, MetaStoreError, NotSubscribedError
from .file import META_FILE_NAME, FileMixedMetaManager
from .ledger import BatchLedger, meta_position_manager
from .manager import MemoryMetaManager, MetaManager
from .model import PositionRange, decode_meta_file, encode_meta_file
from .period_mixed import PeriodMixedMetaManager
from .zkfence import Fence, FencedError
from .zkposition import ZooKeeperPositionManager
from .zookeeper import ZooKeeperMetaManager

__all__ = [
    "META_FILE_NAME",
    "BatchLedger",
    "BatchNotExistError",
    "BatchOrderError",
    "CanalMetaError",
    "Fence",
    "FencedError",
    "FileMixedMetaManager",
    "MemoryMetaManager",
    "MetaManager",
    "MetaStoreError",
    "NotSubscribedError",
    "PeriodMixedMetaManager",
    "PositionRange",
    "ZooKeeperMetaManager",
    "ZooKeeperPositionManager",
    "compare_positions",
    "decode_meta_file",
    "encode_meta_file",
    "journal_key",
    "meta_position_manager",
    "min_position",
]

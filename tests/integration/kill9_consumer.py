"""A consumer process for test_kill9: runs the canal server embedded (conf dir argv[1]) and a client that
takes up to 3 batches ahead and acks them in order, writing every batch it got and every ack it made to
argv[2] (fsynced before it goes on), until killed."""

from __future__ import annotations

import os
import sys
import time

from canal_core.entry.model import CanalEntry
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.server.controller import CanalController


def tokens_of(entries: list[bytes]) -> list[str]:
    """B (transaction begin), E (end), R<id> (a row): a batch may end inside a transaction, and an ack
    then moves the cursor only to the last complete one."""
    out = []
    for raw in entries:
        e = CanalEntry.from_bytes(raw).entry
        if e.entryType == 1:
            out.append("B")
        elif e.entryType == 3:
            out.append("E")
        elif e.entryType == 2:
            for rd in pb.RowChange.FromString(e.storeValue).rowDatas:
                out.append(f"R{int((rd.afterColumns or rd.beforeColumns)[0].value)}")
    return out


def main() -> None:
    conf, log_path = sys.argv[1], sys.argv[2]
    log = open(log_path, "a")  # lives as long as the process

    def record(line: str) -> None:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())

    ctl = CanalController(conf)
    ctl.start()
    client = ClientIdentity("example", 1001, "")
    ctl.server.subscribe(client)
    record(f"START {os.getpid()}")
    delay = float(os.environ.get("K9_ACK_DELAY", "0"))
    while True:
        pending = []
        for _ in range(3):
            msg = ctl.server.get_without_ack(client, 4, 0.2)
            if msg.empty:
                break
            record(f"GOT {msg.batch_id} " + " ".join(tokens_of(msg.raw_entries)))
            pending.append(msg.batch_id)
        if pending and delay:
            time.sleep(delay)  # hold batches outstanding a while, so a kill finds some unacked
        for bid in pending:
            ctl.server.ack(client, bid)
            record(f"ACK {bid}")


if __name__ == "__main__":
    main()

"""Stateful property test of the memory event store: put/get/ack/rollback against a plain list model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from canal_core.entry.model import ENTRY_HEARTBEAT, ENTRY_ROWDATA, ENTRY_TRANSACTIONBEGIN, ENTRY_TRANSACTIONEND
from canal_core.parse.model import EVENT_ALTER, EVENT_INSERT, EVENT_QUERY, EVENT_TRUNCATE
from canal_core.protocol.position import EntryPosition
from canal_core.store import MemoryEventStore, StoredEvent, StoreError

KINDS = [(ENTRY_TRANSACTIONBEGIN, 0), (ENTRY_ROWDATA, EVENT_INSERT), (ENTRY_ROWDATA, EVENT_INSERT),
         (ENTRY_TRANSACTIONEND, 0), (ENTRY_ROWDATA, EVENT_ALTER), (ENTRY_ROWDATA, EVENT_TRUNCATE),
         (ENTRY_ROWDATA, EVENT_QUERY), (ENTRY_HEARTBEAT, 0)]

event_specs = st.tuples(st.sampled_from(KINDS), st.integers(1, 40), st.integers(0, 3))


class StoreMachine(RuleBasedStateMachine):
    """The model: every event ever put, in order, and the three cursors as list indexes (seq + 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.store: MemoryEventStore
        self.model: list[StoredEvent] = []
        self.got = 0  # model[:got] returned by a get (since the last rollback)
        self.acked = 0  # model[:acked] acked
        self.next_offset = 4

    @initialize(size_exp=st.integers(0, 3), mem_unit=st.sampled_from([4, 16]), mode=st.sampled_from(["ITEMSIZE",
                "MEMSIZE"]), ddl_isolation=st.booleans())
    def setup(self, size_exp: int, mem_unit: int, mode: str, ddl_isolation: bool) -> None:
        self.store = MemoryEventStore(buffer_size=1 << size_exp, mem_unit=mem_unit, batch_mode=mode,
                                      ddl_isolation=ddl_isolation)

    # ------------------------------------------------------------ model helpers

    def _held_bytes(self) -> int:
        return sum(e.size for e in self.model[self.acked:])

    def _expected_batch(self, batch_size: int) -> list[StoredEvent]:
        s = self.store
        pending = self.model[self.got:]
        out: list[StoredEvent] = []
        taken = 0
        for e in pending:
            if s.batch_mode.value == "ITEMSIZE":
                if len(out) == batch_size:
                    break
            elif taken > batch_size * s.mem_unit:
                break
            if s.ddl_isolation and e.is_ddl:
                if not out:
                    out.append(e)
                break
            out.append(e)
            taken += e.size
        return out

    # ------------------------------------------------------------ rules

    @rule(specs=st.lists(event_specs, min_size=1, max_size=12))
    def put(self, specs) -> None:
        events = []
        for (entry_type, event_type), size, rows in specs:
            pos = EntryPosition("mysql-bin.000001", self.next_offset, timestamp=1_000 + self.next_offset)
            self.next_offset += 7
            events.append(StoredEvent(b"e%d" % pos.position, pos, entry_type, event_type, rows, size=size))
        # expected: as many as there are free slots, if the memory budget is not used up (try_put never waits)
        s = self.store
        free = s.buffer_size - (len(self.model) - self.acked)
        within_budget = s.batch_mode.value == "ITEMSIZE" or self._held_bytes() < s.buffer_size * s.mem_unit
        expected = min(len(events), free) if within_budget else 0
        self.model.extend(events[:expected])
        assert self.store.try_put(events) == expected

    @rule(batch_size=st.integers(1, 6))
    def get(self, batch_size: int) -> None:
        expected = self._expected_batch(batch_size)
        acked_ids = {id(e) for e in self.model[:self.acked]}
        batch = self.store.try_get(batch_size)
        assert batch.events == expected  # identity: StoredEvent has no __eq__
        assert not any(id(e) in acked_ids for e in batch.events)
        if expected:
            assert (batch.first_seq, batch.end_seq) == (self.got, self.got + len(expected) - 1)
            marks = [e for e in expected if e.ends_transaction or e.is_ddl]
            assert batch.ack == (marks[-1].position if marks else None)
            assert batch.start == expected[0].position and batch.end == expected[-1].position
        self.got += len(expected)

    @precondition(lambda self: self.got > self.acked)
    @rule(data=st.data(), by_position=st.booleans())
    def ack(self, data, by_position: bool) -> None:
        upto = data.draw(st.integers(self.acked, self.got - 1))  # index of the last event to ack
        if by_position:
            freed = self.store.ack(position=self.model[upto].position)
        else:
            freed = self.store.ack(seq=upto)
        assert freed == upto + 1 - self.acked
        self.acked = upto + 1

    @rule(ahead=st.integers(0, 3))
    def ack_not_got_fails(self, ahead: int) -> None:
        with pytest.raises(StoreError):
            self.store.ack(seq=self.got + ahead)  # not returned by a get yet
        if self.acked:
            with pytest.raises(StoreError):
                self.store.ack(seq=self.acked - 1)  # already acked

    @rule()
    def rollback(self) -> None:
        self.store.rollback()
        self.got = self.acked

    @rule(batch_size=st.integers(1, 4))
    def rollback_redelivers_unacked(self, batch_size: int) -> None:
        self.store.rollback()
        again: list[StoredEvent] = []
        while batch := self.store.try_get(batch_size):
            again.extend(batch.events)
        assert again == self.model[self.acked:]
        assert [e.data for e in again] == [e.data for e in self.model[self.acked:]]
        self.got = len(self.model)

    # ------------------------------------------------------------ invariants

    @invariant()
    def a_put_waits_only_when_a_get_would_not(self) -> None:
        # no room for even one event (what makes a put wait) with events not yet got: a get of any size, which
        # would otherwise wait for more, returns at once, so a parser and a blocking get never wait on each other
        s = self.store
        if s._room() == 0 and s.get_seq < s.put_seq:
            assert s.wait_for(1 << 30, 0)

    @invariant()
    def cursors_match_model(self) -> None:
        s = self.store
        assert (s.put_seq, s.get_seq, s.ack_seq) == (len(self.model) - 1, self.got - 1, self.acked - 1)
        assert s.put_seq - s.ack_seq <= s.buffer_size  # never more than size un-acked
        stats = s.stats()
        assert stats.put_mem == sum(e.size for e in self.model)
        assert stats.get_mem == sum(e.size for e in self.model[:self.got])
        assert stats.ack_mem == sum(e.size for e in self.model[:self.acked])
        assert (stats.put_rows, stats.ack_rows) == (sum(e.rows for e in self.model),
                                                    sum(e.rows for e in self.model[:self.acked]))

    @invariant()
    def acked_slots_released(self) -> None:
        held = [e for e in self.store._events if e is not None]
        assert len(held) == len(self.model) - self.acked


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=300, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])

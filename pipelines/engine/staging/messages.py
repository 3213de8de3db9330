"""Protobuf message classes that read Canal's RowChange faster than EntryProtocol's own: values as bytes, and the
columns of all rows of an entry merged into one list per field."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from canal_core.protocol.proto import EntryProtocol_pb2 as pb

from ..window import OP_DELETE, OP_INSERT, OP_UPDATE


def _staging_messages() -> tuple[Any, Any, Any, Any, Any]:
    """Message classes for reading Canal's RowChange fast, built from EntryProtocol's descriptor (same wire
    format, other Python types):

    - RowChange with each RowData left as its serialized bytes, and ``FullRowChange`` with its columns;
    - RowData whose Column values are bytes (the first row, whose column wrappers give the layout, and rows
      read column by column);
    - ``MergedRowData``: beforeColumns / afterColumns as one ``ColumnFields`` each, a message holding every
      Column field as a repeated field, and ``MergedRowChange`` whose rowDatas is one MergedRowData. Protobuf
      merges repeated occurrences of a message field into one message, so parsing a RowChange with it
      collects each field of all its rows' before (after) columns in one list per field, in column order,
      with no Python object per row or column.

    Values stay bytes throughout: Arrow takes the UTF-8 as it is (and checks it, as protobuf's string parsing
    would), and comparing two values' bytes is comparing their texts."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    old, new = pb.DESCRIPTOR.package, "canal_staging"
    fdp.name, fdp.package = "canal_staging_entry.proto", new
    full = fdp.message_type.add()
    full.CopyFrom(next(m for m in fdp.message_type if m.name == "RowChange"))
    full.name = "FullRowChange"
    for m in fdp.message_type:
        for f in m.field:
            if f.type_name.startswith(f".{old}."):
                f.type_name = f".{new}." + f.type_name[len(old) + 2:]
            if m.name == "Column" and f.name == "value":
                f.type = F.TYPE_BYTES
            if m.name == "RowChange" and f.name == "rowDatas":
                f.type = F.TYPE_BYTES
                f.ClearField("type_name")
    fields = fdp.message_type.add(name="ColumnFields")
    column = next(m for m in fdp.message_type if m.name == "Column")
    for f in column.field:
        scalar = f.type in (F.TYPE_INT32, F.TYPE_BOOL)
        fields.field.add(name=f.name, number=f.number, type=f.type if scalar else F.TYPE_BYTES,
                         label=F.LABEL_REPEATED)
    merged = fdp.message_type.add(name="MergedRowData")
    for number, name in ((1, "beforeColumns"), (2, "afterColumns")):
        merged.field.add(name=name, number=number, type=F.TYPE_MESSAGE, type_name=f".{new}.ColumnFields",
                         label=F.LABEL_OPTIONAL)
    merged.field.add(name="props", number=3, type=F.TYPE_BYTES, label=F.LABEL_REPEATED)
    merged_change = fdp.message_type.add()
    merged_change.CopyFrom(full)
    merged_change.name = "MergedRowChange"
    rows_field = next(f for f in merged_change.field if f.name == "rowDatas")
    rows_field.type_name, rows_field.label = f".{new}.MergedRowData", F.LABEL_OPTIONAL
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{new}.{name}"))
                 for name in ("RowChange", "RowData", "MergedRowData", "MergedRowChange",
                              "FullRowChange"))  # type: ignore[return-value]


_RowChange, _RowData, _MergedRowData, _MergedRowChange, _FullRowChange = _staging_messages()
_DML: dict[int, str] = {pb.INSERT: OP_INSERT, pb.UPDATE: OP_UPDATE, pb.DELETE: OP_DELETE}
_DDL_TYPES = frozenset({pb.CREATE, pb.ALTER, pb.ERASE, pb.RENAME, pb.TRUNCATE, pb.CINDEX, pb.DINDEX})

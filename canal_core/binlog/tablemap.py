"""TABLE_MAP_EVENT bodies: column types, metadata and optional metadata, merged with schema hints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .constants import ColumnType as T
from .packed import read_packed

# Column types whose signedness bit is present in SIGNEDNESS optional metadata.
NUMERIC_TYPES = frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG, T.NEWDECIMAL, T.FLOAT, T.DOUBLE,
                           T.DECIMAL})
# Column types listed in DEFAULT_CHARSET / COLUMN_CHARSET (ENUM/SET have their own lists).
CHARACTER_TYPES = frozenset({T.STRING, T.VAR_STRING, T.VARCHAR, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB,
                             T.LONG_BLOB})
BLOB_TYPES = frozenset({T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB})

# optional metadata field types
OM_SIGNEDNESS = 1
OM_DEFAULT_CHARSET = 2
OM_COLUMN_CHARSET = 3
OM_COLUMN_NAME = 4
OM_SET_STR_VALUE = 5
OM_ENUM_STR_VALUE = 6
OM_GEOMETRY_TYPE = 7
OM_SIMPLE_PRIMARY_KEY = 8
OM_PRIMARY_KEY_WITH_PREFIX = 9
OM_ENUM_AND_SET_DEFAULT_CHARSET = 10
OM_ENUM_AND_SET_COLUMN_CHARSET = 11
OM_COLUMN_VISIBILITY = 12


@dataclass(frozen=True, slots=True)
class ColumnHint:
    """What a schema source (the schema history, information_schema) knows about a column that the
    binlog may not say: used where the table map has no optional metadata."""

    name: str | None = None
    unsigned: bool | None = None
    collation: int | None = None  # collation id; 63 = binary
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    logical: str | None = None  # "uuid" | "inet6" | "inet4" for MariaDB types carried as BINARY(n)


@dataclass(frozen=True, slots=True)
class Column:
    index: int
    type: int  # binlog type; for STRING-wrapped columns the real type (ENUM, SET, STRING)
    meta: int  # raw metadata value as read from the table map
    nullable: bool
    name: str | None = None
    unsigned: bool = False
    collation: int | None = None
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    visible: bool = True
    logical: str | None = None
    # type-specific, derived from meta
    length: int = 0  # STRING/VARCHAR max bytes; ENUM/SET storage bytes; BLOB/JSON/GEOMETRY length bytes
    precision: int = 0
    scale: int = 0
    fsp: int = 0
    bits: int = 0

    @property
    def type_name(self) -> str:
        try:
            return T(self.type).name
        except ValueError:
            return f"TYPE_{self.type}"


@dataclass(frozen=True, slots=True)
class TableDef:
    schema: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[int, ...] = ()
    has_optional_metadata: bool = False
    # cache key for generated decoders: everything that changes how rows decode
    signature: tuple = field(default=(), compare=False)

    @property
    def column_names(self) -> tuple[str | None, ...]:
        return tuple(c.name for c in self.columns)


def _read_meta(types: bytes, data: bytes) -> list[int]:
    """Per-column metadata values from the table map's metadata block."""
    out: list[int] = []
    p = 0
    for t in types:
        if t in (T.FLOAT, T.DOUBLE, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.GEOMETRY, T.JSON,
                 T.TIMESTAMP2, T.DATETIME2, T.TIME2, T.VECTOR):
            out.append(data[p])
            p += 1
        elif t in (T.VARCHAR, T.VAR_STRING, T.BIT):
            out.append(data[p] | data[p + 1] << 8)  # little-endian (BIT: bits%8 low, bytes high)
            p += 2
        elif t in (T.NEWDECIMAL, T.STRING, T.ENUM, T.SET):
            out.append(data[p] << 8 | data[p + 1])  # two separate bytes: (precision|real_type, scale|len)
            p += 2
        else:
            out.append(0)
    if p != len(data):
        raise ValueError(f"column metadata block is {len(data)} bytes, types account for {p}")
    return out


def _column(index: int, t: int, meta: int, nullable: bool) -> Column:
    kw: dict = {}
    if t in (T.STRING, T.ENUM, T.SET):
        b0, b1 = meta >> 8, meta & 0xFF
        if t == T.STRING and b0:
            # the real type hides in byte 0; lengths > 255 borrow two of its bits
            if (b0 & 0x30) != 0x30:
                b1 |= ((b0 & 0x30) ^ 0x30) << 4
                b0 |= 0x30
            t = b0
        kw["length"] = b1
    elif t in (T.VARCHAR, T.VAR_STRING):
        kw["length"] = meta
    elif t == T.NEWDECIMAL:
        kw["precision"], kw["scale"] = meta >> 8, meta & 0xFF
    elif t in (T.TIMESTAMP2, T.DATETIME2, T.TIME2):
        kw["fsp"] = meta
    elif t == T.BIT:
        kw["bits"] = (meta >> 8) * 8 + (meta & 0xFF)
    elif t in BLOB_TYPES or t in (T.GEOMETRY, T.JSON, T.VECTOR, T.FLOAT, T.DOUBLE):
        kw["length"] = meta
    return Column(index=index, type=t, meta=meta, nullable=nullable, **kw)


def _bits(data: bytes, n: int) -> list[bool]:
    """MSB-first bitmap (optional metadata bitmaps)."""
    return [bool(data[i >> 3] & (0x80 >> (i & 7))) for i in range(n)]


def _str_list(data: bytes, p: int) -> tuple[tuple[bytes, ...], int]:
    count, p = read_packed(data, p)
    vals = []
    for _ in range(count):
        n, p = read_packed(data, p)
        vals.append(data[p:p + n])  # raw: decoded below with the column's charset
        p += n
    return tuple(vals), p


def parse_table_map_body(body: bytes, p: int, flavor: str = "mysql") -> TableDef:
    """Parse a TABLE_MAP body from offset p (just after table id and flags). ``flavor`` matters for
    the charset lists: MariaDB counts GEOMETRY columns among the character columns, MySQL does not."""
    character_types = CHARACTER_TYPES | {T.GEOMETRY} if flavor == "mariadb" else CHARACTER_TYPES
    # MariaDB also gives YEAR (a tinyint underneath) a bit in the SIGNEDNESS bitmap; MySQL does not
    numeric_types = NUMERIC_TYPES | {T.YEAR} if flavor == "mariadb" else NUMERIC_TYPES
    n = body[p]
    schema = body[p + 1:p + 1 + n].decode("utf8")
    p += 2 + n
    n = body[p]
    table = body[p + 1:p + 1 + n].decode("utf8")
    p += 2 + n
    ncols, p = read_packed(body, p)
    types = body[p:p + ncols]
    if len(types) != ncols:
        raise ValueError("table map column types truncated")
    p += ncols
    mlen, p = read_packed(body, p)
    metas = _read_meta(types, body[p:p + mlen])
    p += mlen
    nb = (ncols + 7) // 8
    nullbits = body[p:p + nb]
    if len(nullbits) != nb:
        raise ValueError("table map null bitmap truncated")
    p += nb
    cols = [_column(i, types[i], metas[i], bool(nullbits[i >> 3] & (1 << (i & 7)))) for i in range(ncols)]
    extra: dict[int, dict] = {i: {} for i in range(ncols)}
    pk: tuple[int, ...] = ()
    has_om = p < len(body)
    enum_raw: dict[int, tuple[bytes, ...]] = {}
    set_raw: dict[int, tuple[bytes, ...]] = {}
    es_collations: dict[int, int] = {}
    while p < len(body):
        ftype = body[p]
        flen, p = read_packed(body, p + 1)
        fdata = body[p:p + flen]
        if len(fdata) != flen:
            raise ValueError(f"optional metadata field {ftype} truncated")
        p += flen
        if ftype == OM_SIGNEDNESS:
            numeric = [c.index for c in cols if c.type in numeric_types]
            for idx, bit in zip(numeric, _bits(fdata, len(numeric)), strict=True):
                extra[idx]["unsigned"] = bit
        elif ftype in (OM_DEFAULT_CHARSET, OM_ENUM_AND_SET_DEFAULT_CHARSET):
            targets = [c.index for c in cols if (c.type in character_types) == (ftype == OM_DEFAULT_CHARSET)
                       and (ftype == OM_DEFAULT_CHARSET or c.type in (T.ENUM, T.SET))]
            default, q = read_packed(fdata, 0)
            coll = dict.fromkeys(targets, default)
            while q < len(fdata):
                ordinal, q = read_packed(fdata, q)
                cid, q = read_packed(fdata, q)
                coll[targets[ordinal]] = cid
            if ftype == OM_DEFAULT_CHARSET:
                for idx, cid in coll.items():
                    extra[idx]["collation"] = cid
            else:
                es_collations.update(coll)
        elif ftype in (OM_COLUMN_CHARSET, OM_ENUM_AND_SET_COLUMN_CHARSET):
            if ftype == OM_COLUMN_CHARSET:
                targets = [c.index for c in cols if c.type in character_types]
            else:
                targets = [c.index for c in cols if c.type in (T.ENUM, T.SET)]
            q = 0
            for idx in targets:
                cid, q = read_packed(fdata, q)
                if ftype == OM_COLUMN_CHARSET:
                    extra[idx]["collation"] = cid
                else:
                    es_collations[idx] = cid
        elif ftype == OM_COLUMN_NAME:
            q = 0
            for c in cols:
                ln, q = read_packed(fdata, q)
                extra[c.index]["name"] = fdata[q:q + ln].decode("utf8")
                q += ln
        elif ftype in (OM_SET_STR_VALUE, OM_ENUM_STR_VALUE):
            kind = T.SET if ftype == OM_SET_STR_VALUE else T.ENUM
            q = 0
            for c in cols:
                if c.type == kind:
                    vals, q = _str_list(fdata, q)
                    (set_raw if kind == T.SET else enum_raw)[c.index] = vals
        elif ftype == OM_GEOMETRY_TYPE:
            q = 0
            for c in cols:
                if c.type == T.GEOMETRY:
                    gt, q = read_packed(fdata, q)
                    extra[c.index]["geometry_type"] = gt
        elif ftype == OM_SIMPLE_PRIMARY_KEY:
            q, keys = 0, []
            while q < len(fdata):
                k, q = read_packed(fdata, q)
                keys.append(k)
            pk = tuple(keys)
        elif ftype == OM_PRIMARY_KEY_WITH_PREFIX:
            q, keys = 0, []
            while q < len(fdata):
                k, q = read_packed(fdata, q)
                _prefix, q = read_packed(fdata, q)
                keys.append(k)
            pk = tuple(keys)
        elif ftype == OM_COLUMN_VISIBILITY:
            for c, bit in zip(cols, _bits(fdata, ncols), strict=True):
                extra[c.index]["visible"] = bit
        # unknown optional metadata types are skipped: their length is known and they only add facts
    from .values import codec_for_collation  # local import: values imports nothing from here

    for key, raw in (("enum_values", enum_raw), ("set_values", set_raw)):
        for idx, vals in raw.items():
            codec = codec_for_collation(es_collations.get(idx, 45)) or "utf8"
            extra[idx][key] = tuple(v.decode(codec) for v in vals)
    cols = [replace(c, **extra[c.index]) if extra[c.index] else c for c in cols]
    return TableDef(schema=schema, table=table, columns=tuple(cols), primary_key=pk,
                    has_optional_metadata=has_om, signature=_signature(cols))


def _signature(cols: list[Column]) -> tuple:
    return tuple((c.type, c.meta, c.unsigned, c.collation, c.enum_values, c.set_values, c.logical)
                 for c in cols)


def apply_hints(tdef: TableDef, hints: Sequence[ColumnHint]) -> TableDef:
    """Fill what the binlog did not say from a schema source. Binlog metadata, when present, wins;
    a hint list whose length differs from the table map is ignored (the schema history issue
    turns that into a loud mismatch error)."""
    if len(hints) != len(tdef.columns):
        return tdef
    cols = []
    for c, h in zip(tdef.columns, hints, strict=True):
        kw: dict = {}
        if c.name is None and h.name is not None:
            kw["name"] = h.name
        if h.unsigned is not None and c.type in NUMERIC_TYPES and not tdef.has_optional_metadata:
            kw["unsigned"] = h.unsigned
        if c.collation is None and h.collation is not None:
            kw["collation"] = h.collation
        if c.enum_values is None and h.enum_values is not None:
            kw["enum_values"] = h.enum_values
        if c.set_values is None and h.set_values is not None:
            kw["set_values"] = h.set_values
        if h.logical is not None:
            kw["logical"] = h.logical
        cols.append(replace(c, **kw) if kw else c)
    return replace(tdef, columns=tuple(cols), signature=_signature(cols))

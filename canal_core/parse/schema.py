"""The in-memory schema model of the schema history: databases -> tables -> columns, evolved by the
operations of ``ddl.parse_ddl`` and rendered the way MariaDB 10.11 prints information_schema.COLUMNS
(COLUMN_TYPE with display widths, DATA_TYPE, CHARACTER_SET_NAME / COLLATION_NAME, COLUMN_KEY = PRI).

Rules followed (checked against the live server by tests/integration/test_schema_history.py):
- integer display widths: tinyint(4)/(3 unsigned), smallint(6)/(5), mediumint(9)/(8), int(11)/(10),
  bigint(20)/(20); an explicit width is kept; ZEROFILL implies UNSIGNED; BOOL = tinyint(1).
- decimal defaults to (10,0); FLOAT(p) is float for p <= 24, double above; REAL = double.
- char/binary default to (1); bit to (1); TEXT(n)/BLOB(n) pick the smallest type holding n characters;
  YEAR prints year(4); fractional seconds print only when > 0.
- character columns: the column's COLLATE, else its CHARACTER SET's default collation (BINARY attribute
  = the charset's _bin), else the table's; a table's comes from its options, else the database's,
  else the server's. CHARACTER SET binary turns char/varchar/text into binary/varbinary/blob;
  NATIONAL types are utf8mb3; utf8 means utf8mb3 (old_mode UTF8_IS_UTF8MB3, the 10.11 default).
- MariaDB JSON is longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin; UUID, INET6, INET4 are their own
  types without a charset.
- the key columns (is_key) are the primary key's; without one, those of the first UNIQUE index whose
  columns are all NOT NULL and unprefixed (the server shows that index as PRI). Primary key columns
  are NOT NULL.
- CONVERT TO CHARACTER SET changes every character column and widens TEXT types so that they keep
  their length in characters; DEFAULT CHARSET only changes the table default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from . import ddl as D
from .model import ColumnMeta, SchemaHistoryError, TableMeta

__all__ = ["COLLATIONS", "Collations", "SchemaApplyError", "SchemaModel", "effective_primary_key"]


class SchemaApplyError(SchemaHistoryError):
    """A DDL statement does not fit the model (e.g. drops a column the model does not have): the
    history has drifted from the server."""

    def __init__(self, message: str, table: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.table = table


# ---- character sets and collations (information_schema of MariaDB 10.11) ---------------------------
# "charset:maxlen" starts a group; "_suffix=id" names charset + suffix, "*" marks the default.
_COLLATION_TABLE = """
armscii8:1 _general_ci=32* _bin=64 _general_nopad_ci=1056 _nopad_bin=1088
ascii:1 _general_ci=11* _bin=65 _general_nopad_ci=1035 _nopad_bin=1089
big5:2 _chinese_ci=1* _bin=84 _chinese_nopad_ci=1025 _nopad_bin=1108
binary:1 binary=63*
cp1250:1 _general_ci=26* _czech_cs=34 _croatian_ci=44 _bin=66 _polish_ci=99 _general_nopad_ci=1050
    _nopad_bin=1090
cp1251:1 _bulgarian_ci=14 _ukrainian_ci=23 _bin=50 _general_ci=51* _general_cs=52 _nopad_bin=1074
    _general_nopad_ci=1075
cp1256:1 _general_ci=57* _bin=67 _general_nopad_ci=1081 _nopad_bin=1091
cp1257:1 _lithuanian_ci=29 _bin=58 _general_ci=59* _nopad_bin=1082 _general_nopad_ci=1083
cp850:1 _general_ci=4* _bin=80 _general_nopad_ci=1028 _nopad_bin=1104
cp852:1 _general_ci=40* _bin=81 _general_nopad_ci=1064 _nopad_bin=1105
cp866:1 _general_ci=36* _bin=68 _general_nopad_ci=1060 _nopad_bin=1092
cp932:2 _japanese_ci=95* _bin=96 _japanese_nopad_ci=1119 _nopad_bin=1120
dec8:1 _swedish_ci=3* _bin=69 _swedish_nopad_ci=1027 _nopad_bin=1093
eucjpms:3 _japanese_ci=97* _bin=98 _japanese_nopad_ci=1121 _nopad_bin=1122
euckr:2 _korean_ci=19* _bin=85 _korean_nopad_ci=1043 _nopad_bin=1109
gb2312:2 _chinese_ci=24* _bin=86 _chinese_nopad_ci=1048 _nopad_bin=1110
gbk:2 _chinese_ci=28* _bin=87 _chinese_nopad_ci=1052 _nopad_bin=1111
geostd8:1 _general_ci=92* _bin=93 _general_nopad_ci=1116 _nopad_bin=1117
greek:1 _general_ci=25* _bin=70 _general_nopad_ci=1049 _nopad_bin=1094
hebrew:1 _general_ci=16* _bin=71 _general_nopad_ci=1040 _nopad_bin=1095
hp8:1 _english_ci=6* _bin=72 _english_nopad_ci=1030 _nopad_bin=1096
keybcs2:1 _general_ci=37* _bin=73 _general_nopad_ci=1061 _nopad_bin=1097
koi8r:1 _general_ci=7* _bin=74 _general_nopad_ci=1031 _nopad_bin=1098
koi8u:1 _general_ci=22* _bin=75 _general_nopad_ci=1046 _nopad_bin=1099
latin1:1 _german1_ci=5 _swedish_ci=8* _danish_ci=15 _german2_ci=31 _bin=47 _general_ci=48 _general_cs=49
    _spanish_ci=94 _swedish_nopad_ci=1032 _nopad_bin=1071
latin2:1 _czech_cs=2 _general_ci=9* _hungarian_ci=21 _croatian_ci=27 _bin=77 _general_nopad_ci=1033
    _nopad_bin=1101
latin5:1 _turkish_ci=30* _bin=78 _turkish_nopad_ci=1054 _nopad_bin=1102
latin7:1 _estonian_cs=20 _general_ci=41* _general_cs=42 _bin=79 _general_nopad_ci=1065 _nopad_bin=1103
macce:1 _general_ci=38* _bin=43 _general_nopad_ci=1062 _nopad_bin=1067
macroman:1 _general_ci=39* _bin=53 _general_nopad_ci=1063 _nopad_bin=1077
sjis:2 _japanese_ci=13* _bin=88 _japanese_nopad_ci=1037 _nopad_bin=1112
swe7:1 _swedish_ci=10* _bin=82 _swedish_nopad_ci=1034 _nopad_bin=1106
tis620:1 _thai_ci=18* _bin=89 _thai_nopad_ci=1042 _nopad_bin=1113
ucs2:2 _general_ci=35* _bin=90 _unicode_ci=128 _icelandic_ci=129 _latvian_ci=130 _romanian_ci=131
    _slovenian_ci=132 _polish_ci=133 _estonian_ci=134 _spanish_ci=135 _swedish_ci=136 _turkish_ci=137
    _czech_ci=138 _danish_ci=139 _lithuanian_ci=140 _slovak_ci=141 _spanish2_ci=142 _roman_ci=143
    _persian_ci=144 _esperanto_ci=145 _hungarian_ci=146 _sinhala_ci=147 _german2_ci=148
    _croatian_mysql561_ci=149 _unicode_520_ci=150 _vietnamese_ci=151 _general_mysql500_ci=159 _croatian_ci=640
    _myanmar_ci=641 _thai_520_w2=642 _general_nopad_ci=1059 _nopad_bin=1114 _unicode_nopad_ci=1152
    _unicode_520_nopad_ci=1174
ujis:3 _japanese_ci=12* _bin=91 _japanese_nopad_ci=1036 _nopad_bin=1115
utf16:4 _general_ci=54* _bin=55 _unicode_ci=101 _icelandic_ci=102 _latvian_ci=103 _romanian_ci=104
    _slovenian_ci=105 _polish_ci=106 _estonian_ci=107 _spanish_ci=108 _swedish_ci=109 _turkish_ci=110
    _czech_ci=111 _danish_ci=112 _lithuanian_ci=113 _slovak_ci=114 _spanish2_ci=115 _roman_ci=116
    _persian_ci=117 _esperanto_ci=118 _hungarian_ci=119 _sinhala_ci=120 _german2_ci=121
    _croatian_mysql561_ci=122 _unicode_520_ci=123 _vietnamese_ci=124 _croatian_ci=672 _myanmar_ci=673
    _thai_520_w2=674 _general_nopad_ci=1078 _nopad_bin=1079 _unicode_nopad_ci=1125 _unicode_520_nopad_ci=1147
utf16le:4 _general_ci=56* _bin=62 _general_nopad_ci=1080 _nopad_bin=1086
utf32:4 _general_ci=60* _bin=61 _unicode_ci=160 _icelandic_ci=161 _latvian_ci=162 _romanian_ci=163
    _slovenian_ci=164 _polish_ci=165 _estonian_ci=166 _spanish_ci=167 _swedish_ci=168 _turkish_ci=169
    _czech_ci=170 _danish_ci=171 _lithuanian_ci=172 _slovak_ci=173 _spanish2_ci=174 _roman_ci=175
    _persian_ci=176 _esperanto_ci=177 _hungarian_ci=178 _sinhala_ci=179 _german2_ci=180
    _croatian_mysql561_ci=181 _unicode_520_ci=182 _vietnamese_ci=183 _croatian_ci=736 _myanmar_ci=737
    _thai_520_w2=738 _general_nopad_ci=1084 _nopad_bin=1085 _unicode_nopad_ci=1184 _unicode_520_nopad_ci=1206
utf8mb3:3 _general_ci=33* _bin=83 _unicode_ci=192 _icelandic_ci=193 _latvian_ci=194 _romanian_ci=195
    _slovenian_ci=196 _polish_ci=197 _estonian_ci=198 _spanish_ci=199 _swedish_ci=200 _turkish_ci=201
    _czech_ci=202 _danish_ci=203 _lithuanian_ci=204 _slovak_ci=205 _spanish2_ci=206 _roman_ci=207
    _persian_ci=208 _esperanto_ci=209 _hungarian_ci=210 _sinhala_ci=211 _german2_ci=212
    _croatian_mysql561_ci=213 _unicode_520_ci=214 _vietnamese_ci=215 _general_mysql500_ci=223 _croatian_ci=576
    _myanmar_ci=577 _thai_520_w2=578 _general_nopad_ci=1057 _nopad_bin=1107 _unicode_nopad_ci=1216
    _unicode_520_nopad_ci=1238
utf8mb4:4 _general_ci=45* _bin=46 _unicode_ci=224 _icelandic_ci=225 _latvian_ci=226 _romanian_ci=227
    _slovenian_ci=228 _polish_ci=229 _estonian_ci=230 _spanish_ci=231 _swedish_ci=232 _turkish_ci=233
    _czech_ci=234 _danish_ci=235 _lithuanian_ci=236 _slovak_ci=237 _spanish2_ci=238 _roman_ci=239
    _persian_ci=240 _esperanto_ci=241 _hungarian_ci=242 _sinhala_ci=243 _german2_ci=244
    _croatian_mysql561_ci=245 _unicode_520_ci=246 _vietnamese_ci=247 _croatian_ci=608 _myanmar_ci=609
    _thai_520_w2=610 _general_nopad_ci=1069 _nopad_bin=1070 _unicode_nopad_ci=1248 _unicode_520_nopad_ci=1270
"""

# uca1400 collations (MariaDB 10.10+): id = base + language * 8 + nopad * 4 + accent-sensitive * 2 + cs
_UCA1400_BASE = {"utf8mb3": 2048, "utf8mb4": 2304, "ucs2": 2560, "utf16": 2816, "utf32": 3072}
_UCA1400_LANGS = {
    "": 0, "icelandic": 1, "latvian": 2, "romanian": 3, "slovenian": 4, "polish": 5, "estonian": 6, "spanish": 7,
    "swedish": 8, "turkish": 9, "czech": 10, "danish": 11, "lithuanian": 12, "slovak": 13, "spanish2": 14,
    "roman": 15, "persian": 16, "esperanto": 17, "hungarian": 18, "sinhala": 19, "german2": 20,
    "vietnamese": 23, "croatian": 24,
}
_UCA1400_RE = re.compile(r"([a-z0-9]+)_uca1400(?:_([a-z0-9]+?))?(_nopad)?_(ai|as)_(ci|cs)")


class Collations:
    """Collation names <-> ids, charsets' defaults and maximum bytes per character."""

    def __init__(self, table: str = _COLLATION_TABLE) -> None:
        self.ids: dict[str, int] = {}
        self.charset_of_collation: dict[str, str] = {}
        self.default: dict[str, str] = {}
        self.maxlen: dict[str, int] = {}
        cs = ""
        for tok in table.split():
            if "=" not in tok:
                cs, ml = tok.split(":")
                self.maxlen[cs] = int(ml)
                continue
            name, _, rest = tok.partition("=")
            name = cs + name if name.startswith("_") else name
            is_default = rest.endswith("*")
            self.ids[name] = int(rest.rstrip("*"))
            self.charset_of_collation[name] = cs
            if is_default:
                self.default[cs] = name
        self.by_id = {v: k for k, v in self.ids.items()}

    @staticmethod
    def charset_name(name: str | None) -> str | None:
        if name is None:
            return None
        n = name.strip().strip("'\"`").lower()
        return "utf8mb3" if n == "utf8" else n

    def collation_name(self, name: str | None, charset: str | None = None) -> str | None:
        if name is None:
            return None
        n = name.strip().strip("'\"`").lower()
        if n.startswith("utf8_"):
            n = "utf8mb3_" + n[5:]
        if n.startswith("uca1400_") and charset:
            n = f"{charset}_{n}"
        return n

    def collation_id(self, name: str | None) -> int | None:
        if name is None:
            return None
        cid = self.ids.get(name)
        if cid is not None:
            return cid
        m = _UCA1400_RE.fullmatch(name)
        if m and m.group(1) in _UCA1400_BASE and (m.group(2) or "") in _UCA1400_LANGS:
            return (_UCA1400_BASE[m.group(1)] + _UCA1400_LANGS[m.group(2) or ""] * 8 + (4 if m.group(3) else 0)
                    + (2 if m.group(4) == "as" else 0) + (1 if m.group(5) == "cs" else 0))
        return None

    def charset_of(self, collation: str) -> str | None:
        cs = self.charset_of_collation.get(collation)
        if cs is None:
            m = _UCA1400_RE.fullmatch(collation)
            if m:
                cs = m.group(1)
            elif "_" in collation:
                cs = collation.split("_", 1)[0]
        return cs

    def default_collation(self, charset: str) -> str:
        return self.default.get(charset) or f"{charset}_general_ci"

    def bin_collation(self, charset: str) -> str:
        return "binary" if charset == "binary" else f"{charset}_bin"

    def bytes_per_char(self, charset: str | None) -> int:
        return self.maxlen.get(charset or "", 4)


COLLATIONS = Collations()

# ---- types -----------------------------------------------------------------------------------------

_INT_WIDTH = {"tinyint": (4, 3), "smallint": (6, 5), "mediumint": (9, 8), "int": (11, 10), "bigint": (20, 20)}
_TEXT_TYPES = (("tinytext", 255), ("text", 65535), ("mediumtext", 16777215), ("longtext", 4294967295))
_BLOB_TYPES = (("tinyblob", 255), ("blob", 65535), ("mediumblob", 16777215), ("longblob", 4294967295))
_TEXT_BYTES = dict(_TEXT_TYPES)
_CHAR_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BINARY_OF = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
              "mediumtext": "mediumblob", "longtext": "longblob"}
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
GEOMETRY_TYPES = frozenset({"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                            "multipolygon", "geometrycollection"})
_TEMPORAL_FSP = {"time", "datetime", "timestamp"}
_SEQUENCE_COLUMNS = (("next_not_cached_value", False), ("minimum_value", False), ("maximum_value", False),
                     ("start_value", False), ("increment", False), ("cache_size", True),
                     ("cycle_option", True), ("cycle_count", False))


def _enum_text(values: Iterable[str]) -> str:
    return ",".join("'" + v.replace("\\", "\\\\").replace("'", "''") + "'" for v in values)


def _sized(kinds: tuple[tuple[str, int], ...], nbytes: int) -> str:
    for name, cap in kinds:
        if nbytes <= cap:
            return name
    return kinds[-1][0]


@dataclass
class _Db:
    name: str
    charset: str
    collation: str


@dataclass
class SchemaModel:
    """Databases and tables as the history knows them. Tables are TableMeta (model.py) whose
    ``extra["indexes"]`` holds the index definitions (``ddl.IndexSpec``)."""

    charset: str = "utf8mb4"  # @@character_set_server
    collation: str = "utf8mb4_general_ci"  # @@collation_server
    explicit_defaults_for_timestamp: bool = True
    lower_case_table_names: int = 0
    flavor: str = "mariadb"  # "mariadb" | "mysql": JSON is longtext on MariaDB
    collations: Collations = field(default=COLLATIONS, repr=False)
    databases: dict[str, _Db] = field(default_factory=dict)
    tables: dict[tuple[str, str], TableMeta] = field(default_factory=dict)

    # ---- lookups --------------------------------------------------------------------------------

    def key(self, schema: str, name: str) -> tuple[str, str]:
        if self.lower_case_table_names:
            return schema.lower(), name.lower()
        return schema, name

    def table(self, schema: str, name: str) -> TableMeta | None:
        return self.tables.get(self.key(schema, name))

    def database(self, name: str) -> _Db:
        db = self.databases.get(name.lower() if self.lower_case_table_names else name)
        if db is None:
            return _Db(name=name, charset=self.charset, collation=self.collation)
        return db

    def copy(self) -> SchemaModel:
        return replace(self, databases={k: replace(v) for k, v in self.databases.items()},
                       tables=dict(self.tables))

    # ---- applying operations ------------------------------------------------------------------

    def apply(self, parsed: D.ParsedDdl) -> list[tuple[str, str]]:
        """Apply a parsed statement; returns the (schema, table) pairs whose definition changed
        (old and new names for renames, dropped tables included)."""
        changed: list[tuple[str, str]] = []
        for op in parsed.operations:
            changed.extend(self.apply_operation(op))
        return changed

    def apply_operation(self, op: Any) -> list[tuple[str, str]]:
        if isinstance(op, D.CreateTable):
            return self._create_table(op)
        if isinstance(op, D.AlterTable):
            return self._alter_table(op)
        if isinstance(op, D.RenameTables):
            return self._rename_tables(op)
        if isinstance(op, D.DropTables):
            if op.temporary:
                return []  # temporary tables are never in the model (not logged in ROW format)
            # a table the history does not know (another schema, or lost track of) is simply gone
            for s, t in op.tables:
                self.tables.pop(self.key(s, t), None)
            return list(op.tables)
        if isinstance(op, D.TruncateTables):
            return []
        if isinstance(op, D.CreateDatabase):
            cs, coll = self._charset_pair(op.charset, op.collation, self.charset, self.collation)
            k = op.name.lower() if self.lower_case_table_names else op.name
            if k in self.databases and op.if_not_exists:
                return []
            self.databases[k] = _Db(op.name, cs, coll)
            return []
        if isinstance(op, D.AlterDatabase):
            db = self.database(op.name)
            cs, coll = self._charset_pair(op.charset, op.collation, db.charset, db.collation, keep=True)
            k = op.name.lower() if self.lower_case_table_names else op.name
            self.databases[k] = _Db(op.name, cs, coll)
            return []
        if isinstance(op, D.DropDatabase):
            k = op.name.lower() if self.lower_case_table_names else op.name
            self.databases.pop(k, None)
            gone = [key for key in self.tables if key[0] == self.key(op.name, "")[0]]
            for key in gone:
                del self.tables[key]
            return gone
        if isinstance(op, D.CreateSequence):
            return self._create_sequence(op)
        raise SchemaApplyError(f"unknown operation {type(op).__name__}")

    def _charset_pair(self, cs: str | None, coll: str | None, dcs: str, dcoll: str,
                      keep: bool = False) -> tuple[str, str]:
        C = self.collations
        cs = C.charset_name(cs)
        coll = C.collation_name(coll, cs)
        if coll and not cs:
            cs = C.charset_of(coll) or dcs
        if cs and not coll:
            coll = C.default_collation(cs)
        if not cs:
            return dcs, dcoll
        return cs, coll  # type: ignore[return-value]

    # ---- columns ------------------------------------------------------------------------------

    def column_meta(self, spec: D.ColumnSpec, table_charset: str, table_collation: str) -> ColumnMeta:
        """A column definition -> ColumnMeta as information_schema prints it."""
        C = self.collations
        t = spec.type
        p = spec.params
        unsigned = spec.unsigned or spec.zerofill
        nullable = spec.nullable
        sfx = (" unsigned" if unsigned else "") + (" zerofill" if spec.zerofill else "")
        charset = collation = None
        values = spec.values
        if t == "serial":
            t, p, unsigned, sfx = "bigint", (), True, " unsigned"
            nullable = False
        if t == "bool":
            t, p = "tinyint", (1,)
        if t in ("nchar", "nvarchar"):
            t = "char" if t == "nchar" else "varchar"
            spec = replace(spec, charset=spec.charset or "utf8mb3")
        if t == "json" and self.flavor == "mariadb":
            t = "longtext"
            spec = replace(spec, charset="utf8mb4", collation="utf8mb4_bin")
        if t in _CHAR_TYPES:
            charset, collation = self._column_charset(spec, table_charset, table_collation)
            if charset == "binary" and t in _BINARY_OF:
                t = _BINARY_OF[t]
                charset = collation = None
        if t in _INT_WIDTH:
            width = p[0] if p else _INT_WIDTH[t][1 if unsigned else 0]
            column_type = f"{t}({width}){sfx}"
        elif t == "decimal":
            m = p[0] if p else 10
            d = p[1] if len(p) > 1 else 0
            column_type = f"decimal({m},{d}){sfx}"
        elif t in ("float", "double"):
            if t == "float" and len(p) == 1 and p[0] > 24:
                t = "double"
                p = ()
            if len(p) >= 2:
                column_type = f"{t}({p[0]},{p[1]}){sfx}"
            else:
                column_type = f"{t}{sfx}"
        elif t == "bit":
            column_type = f"bit({p[0] if p else 1})"
        elif t in ("char", "binary"):
            column_type = f"{t}({p[0] if p else 1})"
        elif t in ("varchar", "varbinary"):
            if not p:
                raise SchemaApplyError(f"column {spec.name}: {t} without a length")
            column_type = f"{t}({p[0]})"
        elif t in ("tinytext", "text", "mediumtext", "longtext"):
            if p and t == "text":
                t = _sized(_TEXT_TYPES, p[0] * C.bytes_per_char(charset))
            column_type = t
        elif t in ("tinyblob", "blob", "mediumblob", "longblob"):
            if p and t == "blob":
                t = _sized(_BLOB_TYPES, p[0])
            column_type = t
        elif t in ("enum", "set"):
            column_type = f"{t}({_enum_text(values or ())})"
        elif t in _TEMPORAL_FSP:
            column_type = f"{t}({p[0]})" if p and p[0] else t
        elif t == "year":
            column_type = "year(4)"
        elif t in ("date", "uuid", "inet6", "inet4", "json") or t in GEOMETRY_TYPES:
            column_type = t
        elif t == "":
            column_type = ""
        else:
            raise SchemaApplyError(f"column {spec.name}: unsupported type {t!r}")
        if nullable is None:
            nullable = not (t == "timestamp" and not self.explicit_defaults_for_timestamp)
        coll_id = C.collation_id(collation) if collation else (63 if t in BINARY_TYPES or t in GEOMETRY_TYPES
                                                                 else None)
        return ColumnMeta(
            name=spec.name, data_type=t, column_type=column_type, nullable=bool(nullable),
            unsigned=unsigned and t in (*_INT_WIDTH, "decimal", "float", "double"),
            charset=charset, collation=collation, collation_id=coll_id,
            enum_values=tuple(values) if t == "enum" and values is not None else None,
            set_values=tuple(values) if t == "set" and values is not None else None,
            default=spec.default, generated=spec.generated)

    def _column_charset(self, spec: D.ColumnSpec, tcs: str, tcoll: str) -> tuple[str, str]:
        C = self.collations
        cs = C.charset_name(spec.charset)
        coll = C.collation_name(spec.collation, cs or tcs)
        if coll and not cs:
            cs = C.charset_of(coll)
        if cs and not coll:
            coll = C.bin_collation(cs) if spec.binary else C.default_collation(cs)
        if not cs:
            cs = tcs
            coll = C.bin_collation(cs) if spec.binary else tcoll
        return cs, coll  # type: ignore[return-value]

    # ---- tables -------------------------------------------------------------------------------

    def _new_table(self, schema: str, name: str, columns: list[ColumnMeta], indexes: list[D.IndexSpec],
                   charset: str, collation: str, comment: str = "", **extra: Any) -> TableMeta:
        tm = TableMeta(schema=schema, name=name, columns=tuple(columns), charset=charset, collation=collation,
                       comment=comment, extra={"indexes": tuple(indexes), **extra})
        return _with_keys(tm)

    def _create_table(self, op: D.CreateTable) -> list[tuple[str, str]]:
        if op.temporary:
            return []
        key = self.key(op.schema, op.name)
        if key in self.tables and op.if_not_exists:
            return []
        if op.like is not None:
            src = self.table(*op.like)
            if src is None:
                raise SchemaApplyError(f"CREATE TABLE {op.schema}.{op.name} LIKE {op.like[0]}.{op.like[1]}: "
                                       "the source table is not in the history", (op.schema, op.name))
            self.tables[key] = TableMeta(schema=op.schema, name=op.name, columns=src.columns, charset=src.charset,
                                         collation=src.collation, comment=src.comment, extra=dict(src.extra))
            return [(op.schema, op.name)]
        db = self.database(op.schema)
        tcs, tcoll = self._charset_pair(op.charset, op.collation, db.charset, db.collation)
        columns: list[ColumnMeta] = []
        indexes: list[D.IndexSpec] = []
        for spec in op.columns:
            columns.append(self.column_meta(spec, tcs, tcoll))
            indexes.extend(_inline_indexes(spec))
        incomplete = False
        if op.select is not None:
            have = {c.name.lower() for c in columns}
            for sc in op.select:
                for cm in self._select_column(sc):
                    if cm.data_type == "":
                        incomplete = True
                    if cm.name.lower() not in have:
                        columns.append(cm)
                        have.add(cm.name.lower())
        for ix in op.indexes:
            indexes = _add_index(indexes, ix, columns)
        extra: dict[str, Any] = {"incomplete": True} if incomplete else {}
        tm = self._new_table(op.schema, op.name, _pk_not_null(columns, indexes), indexes, tcs, tcoll,
                             op.comment or "", **extra)
        self.tables[key] = tm
        return [(op.schema, op.name)]

    def _select_column(self, sc: D.SelectColumn) -> list[ColumnMeta]:
        if sc.source is not None:
            src = self.table(sc.source[0], sc.source[1])
            if src is not None:
                if sc.source[2] == "*":
                    return [replace(c, is_key=False) for c in src.columns]
                c = src.column(sc.source[2])
                if c is not None:
                    return [replace(c, name=sc.name, is_key=False)]
        if sc.name == "*":
            return [ColumnMeta(name="*", data_type="", column_type="")]
        return [ColumnMeta(name=sc.name, data_type="", column_type="")]

    def _create_sequence(self, op: D.CreateSequence) -> list[tuple[str, str]]:
        key = self.key(op.schema, op.name)
        if key in self.tables and op.if_not_exists:
            return []
        cols = []
        for name, unsigned in _SEQUENCE_COLUMNS:
            t = "tinyint" if name == "cycle_option" else "bigint"
            width = 1 if t == "tinyint" else 21
            cols.append(ColumnMeta(name=name, data_type=t, column_type=f"{t}({width})" + (" unsigned" if unsigned
                                                                                          else ""),
                                   nullable=False, unsigned=unsigned))
        db = self.database(op.schema)
        self.tables[key] = self._new_table(op.schema, op.name, cols, [], db.charset, db.collation, sequence=True)
        return [(op.schema, op.name)]

    def _rename_tables(self, op: D.RenameTables) -> list[tuple[str, str]]:
        # applied one pair at a time, like the server (a TO tmp, b TO a, tmp TO b swaps)
        out = []
        for old, new in op.pairs:
            tm = self.tables.pop(self.key(*old), None)
            if tm is None:
                raise SchemaApplyError(f"RENAME TABLE {old[0]}.{old[1]}: no such table in the history", old)
            if self.key(*new) in self.tables:
                raise SchemaApplyError(f"RENAME TABLE to {new[0]}.{new[1]}: that table already exists in the "
                                       "history", new)
            self.tables[self.key(*new)] = tm.renamed(new[0], new[1])
            out.extend([old, new])
        return out

    def _alter_table(self, op: D.AlterTable) -> list[tuple[str, str]]:
        key = self.key(op.schema, op.name)
        tm = self.tables.get(key)
        name = (op.schema, op.name)
        if tm is None:
            raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name}: no such table in the history", name)
        cols = list(tm.columns)
        indexes = list(tm.extra.get("indexes", ()))
        tcs, tcoll = tm.charset or self.charset, tm.collation or self.collation
        comment = tm.comment
        new_name = name
        # like the server: table options (the new default charset) hold for the whole statement, and
        # CONVERT TO CHARACTER SET converts every character column of the result
        convert = None
        for a in op.actions:
            if isinstance(a, D.TableOptions) and (a.charset or a.collation):
                tcs, tcoll = self._charset_pair(a.charset, a.collation, tcs, tcoll)
            elif isinstance(a, D.ConvertCharset):
                tcs, tcoll = self._charset_pair(a.charset, a.collation, tcs, tcoll)
                convert = (tcs, tcoll)
        for a in op.actions:
            if isinstance(a, D.ConvertCharset) or (isinstance(a, D.TableOptions) and a.comment is None):
                continue
            try:
                cols, indexes, tcs, tcoll, comment, new_name = self._action(a, cols, indexes, tcs, tcoll,
                                                                            comment, new_name)
            except SchemaApplyError as e:
                raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name}: {e}", name) from None
        if convert is not None:
            cols = [self._convert(c, *convert) for c in cols]
        extra = {k: v for k, v in tm.extra.items() if k != "indexes"}
        new = self._new_table(new_name[0], new_name[1], _pk_not_null(cols, indexes), indexes, tcs, tcoll,
                              comment, **extra)
        del self.tables[key]
        if new_name != name and self.key(*new_name) in self.tables:
            raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name} RENAME: {new_name[0]}.{new_name[1]} "
                                   "already exists in the history", name)
        self.tables[self.key(*new_name)] = new
        return [name] if new_name == name else [name, new_name]

    def _action(self, a: Any, cols: list[ColumnMeta], indexes: list[D.IndexSpec], tcs: str, tcoll: str,
                comment: str, name: tuple[str, str]) -> tuple:
        def find(cname: str) -> int:
            low = cname.lower()
            for i, c in enumerate(cols):
                if c.name.lower() == low:
                    return i
            return -1

        def place(cm: ColumnMeta, first: bool, after: str | None, at: int | None = None) -> None:
            if first:
                cols.insert(0, cm)
            elif after is not None:
                j = find(after)
                if j < 0:
                    raise SchemaApplyError(f"AFTER {after}: no such column")
                cols.insert(j + 1, cm)
            elif at is not None:
                cols.insert(at, cm)
            else:
                cols.append(cm)

        if isinstance(a, D.AddColumn):
            if find(a.spec.name) >= 0:
                if a.if_not_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"ADD COLUMN {a.spec.name}: the column already exists")
            place(self.column_meta(a.spec, tcs, tcoll), a.first, a.after)
            for ix in _inline_indexes(a.spec):
                indexes = _add_index(indexes, ix, cols)
        elif isinstance(a, D.DropColumn):
            i = find(a.name)
            if i < 0:
                if a.if_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"DROP COLUMN {a.name}: no such column")
            gone = cols.pop(i).name.lower()
            indexes = _drop_index_column(indexes, gone)
        elif isinstance(a, D.ModifyColumn | D.ChangeColumn):
            old = a.old if isinstance(a, D.ChangeColumn) else a.spec.name
            i = find(old)
            if i < 0:
                if a.if_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"{'CHANGE' if isinstance(a, D.ChangeColumn) else 'MODIFY'} {old}: "
                                       "no such column")
            cols.pop(i)
            if a.spec.name.lower() != old.lower() and find(a.spec.name) >= 0:
                raise SchemaApplyError(f"CHANGE {old} {a.spec.name}: the new name is taken")
            place(self.column_meta(a.spec, tcs, tcoll), a.first, a.after, at=i)
            if a.spec.name != old:
                indexes = _rename_index_column(indexes, old, a.spec.name)
            for ix in _inline_indexes(a.spec):
                indexes = _add_index(indexes, ix, cols)
        elif isinstance(a, D.RenameColumn):
            i = find(a.old)
            if i < 0:
                raise SchemaApplyError(f"RENAME COLUMN {a.old}: no such column")
            if a.new.lower() != a.old.lower() and find(a.new) >= 0:
                raise SchemaApplyError(f"RENAME COLUMN {a.old} TO {a.new}: the new name is taken")
            cols[i] = replace(cols[i], name=a.new)
            indexes = _rename_index_column(indexes, a.old, a.new)
        elif isinstance(a, D.RenameTo):
            name = (a.schema, a.name)
        elif isinstance(a, D.AddIndex):
            if a.if_not_exists and a.index.name and any((x.name or "").lower() == a.index.name.lower()
                                                        for x in indexes):
                return cols, indexes, tcs, tcoll, comment, name
            for cname, _ in a.index.columns:
                if find(cname) < 0:
                    raise SchemaApplyError(f"index on {cname}: no such column")
            indexes = _add_index(indexes, a.index, cols)
        elif isinstance(a, D.DropPrimaryKey):
            if not any(x.kind == "primary" for x in indexes):
                raise SchemaApplyError("DROP PRIMARY KEY: the table has none")
            indexes = [x for x in indexes if x.kind != "primary"]
        elif isinstance(a, D.DropIndex):
            keep = [x for x in indexes if (x.name or "").lower() != a.name.lower() or x.kind == "primary"]
            if len(keep) == len(indexes) and not (a.if_exists or a.constraint):
                raise SchemaApplyError(f"DROP INDEX {a.name}: no such index")
            indexes = keep
        elif isinstance(a, D.RenameIndex):
            indexes = [replace(x, name=a.new) if (x.name or "").lower() == a.old.lower() else x for x in indexes]
        elif isinstance(a, D.SetDefault):
            i = find(a.column)
            if i < 0:
                raise SchemaApplyError(f"ALTER COLUMN {a.column}: no such column")
            cols[i] = replace(cols[i], default=a.default)
        elif isinstance(a, D.TableOptions):
            if a.comment is not None:
                comment = a.comment
        elif isinstance(a, D.NoOp):
            pass
        else:
            raise SchemaApplyError(f"unknown ALTER TABLE action {type(a).__name__}")
        return cols, indexes, tcs, tcoll, comment, name

    def _convert(self, c: ColumnMeta, cs: str, coll: str) -> ColumnMeta:
        if c.charset is None or c.data_type not in _CHAR_TYPES:
            return c
        C = self.collations
        if cs == "binary":
            if c.data_type in _BINARY_OF:
                t = _BINARY_OF[c.data_type]
                ct = c.column_type.replace(c.data_type, t, 1)
                return replace(c, data_type=t, column_type=ct, charset=None, collation=None, collation_id=63)
            return replace(c, charset=None, collation=None, collation_id=63)
        t, ct = c.data_type, c.column_type
        if t in _TEXT_BYTES:
            chars = _TEXT_BYTES[t] // C.bytes_per_char(c.charset)
            wanted = _sized(_TEXT_TYPES, chars * C.bytes_per_char(cs))
            if _TEXT_BYTES[wanted] > _TEXT_BYTES[t]:
                t = ct = wanted
        return replace(c, data_type=t, column_type=ct, charset=cs, collation=coll, collation_id=C.collation_id(coll))

    # ---- snapshots ----------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {"charset": self.charset, "collation": self.collation,
                "explicit_defaults_for_timestamp": self.explicit_defaults_for_timestamp,
                "lower_case_table_names": self.lower_case_table_names, "flavor": self.flavor}

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.settings(),
            "databases": [{"name": d.name, "charset": d.charset, "collation": d.collation}
                          for d in sorted(self.databases.values(), key=lambda d: d.name)],
            "tables": [table_to_dict(t) for _, t in sorted(self.tables.items())],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaModel:
        s = d.get("server") or {}
        m = cls(charset=s.get("charset", "utf8mb4"), collation=s.get("collation", "utf8mb4_general_ci"),
                explicit_defaults_for_timestamp=bool(s.get("explicit_defaults_for_timestamp", True)),
                lower_case_table_names=int(s.get("lower_case_table_names", 0)), flavor=s.get("flavor", "mariadb"))
        for db in d.get("databases") or []:
            k = db["name"].lower() if m.lower_case_table_names else db["name"]
            m.databases[k] = _Db(db["name"], db["charset"], db["collation"])
        for t in d.get("tables") or []:
            tm = table_from_dict(t)
            m.tables[m.key(tm.schema, tm.name)] = tm
        return m


# ---- helpers ---------------------------------------------------------------------------------------

_COLUMN_FIELDS = ("name", "data_type", "column_type", "nullable", "unsigned", "charset", "collation", "collation_id",
                  "enum_values", "set_values", "is_key", "default", "generated")


def table_to_dict(t: TableMeta) -> dict[str, Any]:
    extra = {k: v for k, v in t.extra.items() if k != "indexes"}
    return {
        "schema": t.schema, "name": t.name, "charset": t.charset, "collation": t.collation, "comment": t.comment,
        "columns": [{f: (list(v) if isinstance(v := getattr(c, f), tuple) else v) for f in _COLUMN_FIELDS
                     if getattr(c, f) not in (None, False, "") or f in ("name", "data_type", "column_type",
                                                                          "nullable")}
                    for c in t.columns],
        "indexes": [{"name": x.name, "kind": x.kind, "columns": [list(p) for p in x.columns]}
                    for x in t.extra.get("indexes", ())],
        "extra": extra,
    }


def table_from_dict(d: dict[str, Any]) -> TableMeta:
    cols = []
    for c in d["columns"]:
        kw = dict(c)
        for f in ("enum_values", "set_values"):
            if kw.get(f) is not None:
                kw[f] = tuple(kw[f])
        cols.append(ColumnMeta(**kw))
    indexes = tuple(D.IndexSpec(name=x["name"], kind=x["kind"], columns=tuple((p[0], p[1]) for p in x["columns"]))
                    for x in d.get("indexes") or [])
    return TableMeta(schema=d["schema"], name=d["name"], columns=tuple(cols), charset=d.get("charset"),
                     collation=d.get("collation"), comment=d.get("comment") or "",
                     extra={**(d.get("extra") or {}), "indexes": indexes})


def _inline_indexes(spec: D.ColumnSpec) -> list[D.IndexSpec]:
    out = []
    if spec.primary_key:
        out.append(D.IndexSpec(name="PRIMARY", kind="primary", columns=((spec.name, None),)))
    if spec.unique or spec.type == "serial":
        out.append(D.IndexSpec(name=None, kind="unique", columns=((spec.name, None),)))
    return out


def _add_index(indexes: list[D.IndexSpec], ix: D.IndexSpec, cols: list[ColumnMeta]) -> list[D.IndexSpec]:
    if ix.kind == "primary":
        if any(x.kind == "primary" for x in indexes):
            raise SchemaApplyError("a second PRIMARY KEY")
        return [replace(ix, name="PRIMARY"), *indexes]
    name = ix.name
    taken = {(x.name or "").lower() for x in indexes}
    if not name:
        base = ix.columns[0][0] if ix.columns else "key"
        name, n = base, 2
        while name.lower() in taken:
            name = f"{base}_{n}"
            n += 1
    elif name.lower() in taken:
        raise SchemaApplyError(f"duplicate index name {name}")
    return [*indexes, replace(ix, name=name)]


def _drop_index_column(indexes: list[D.IndexSpec], column: str) -> list[D.IndexSpec]:
    out = []
    for x in indexes:
        cols = tuple(p for p in x.columns if p[0].lower() != column)
        if cols:
            out.append(replace(x, columns=cols))
    return out


def _rename_index_column(indexes: list[D.IndexSpec], old: str, new: str) -> list[D.IndexSpec]:
    low = old.lower()
    return [replace(x, columns=tuple((new if p[0].lower() == low else p[0], p[1]) for p in x.columns))
            for x in indexes]


def _pk_not_null(cols: list[ColumnMeta], indexes: list[D.IndexSpec]) -> list[ColumnMeta]:
    pk = next((x for x in indexes if x.kind == "primary"), None)
    if pk is None:
        return cols
    names = {p[0].lower() for p in pk.columns}
    return [replace(c, nullable=False) if c.name.lower() in names and c.nullable else c for c in cols]


def effective_primary_key(t: TableMeta) -> tuple[str, ...]:
    """The columns the server shows as PRI."""
    indexes = t.extra.get("indexes", ())
    byname = {c.name.lower(): c for c in t.columns}
    for x in indexes:
        if x.kind == "primary":
            return tuple(p[0] for p in x.columns)
    for x in indexes:
        if x.kind == "unique" and x.columns and all(
                p[1] is None and p[0].lower() in byname and not byname[p[0].lower()].nullable
                and byname[p[0].lower()].data_type not in ("tinytext", "text", "mediumtext", "longtext", "tinyblob",
                                                            "blob", "mediumblob", "longblob")
                for p in x.columns):
            return tuple(p[0] for p in x.columns)
    return ()


def _with_keys(t: TableMeta) -> TableMeta:
    pk = {n.lower() for n in effective_primary_key(t)}
    cols = tuple(replace(c, is_key=c.name.lower() in pk) if c.is_key != (c.name.lower() in pk) else c
                 for c in t.columns)
    return replace(t, columns=cols, extra=dict(t.extra))

"""Character sets and collations as information_schema of MariaDB 10.11 lists them: names <-> ids,
charsets' default collations and maximum bytes per character."""

from __future__ import annotations

import re

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

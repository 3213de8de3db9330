"""The Java .properties format canal.properties and instance.properties are read in (java.util.Properties.load):
separators, comments, continuation lines, escapes, line endings, and the file encoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from canal_core.instance.config import ConfigError, load_properties, parse_properties


def test_properties_separators_comments_whitespace() -> None:
    pf = parse_properties(
        "a=1\n"
        "b:2\n"
        "c 3\n"
        "  d  =  4  \n"
        "e\t:\t5\n"
        "f  =  =6\n"
        "g\n"
        "h=\n"
        "# i=comment\n"
        "  ! j=comment\n"
        "\n"
        "Key=upper\n"
        "key=lower\n"
        "k = a:b=c d\n"
    )
    v = pf.values()
    assert v == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "5", "f": "=6", "g": "", "h": "",
                 "Key": "upper", "key": "lower", "k": "a:b=c d"}
    assert pf.props["k"].line == 14


def test_properties_continuation_lines() -> None:
    pf = parse_properties(
        "list = a,\\\n"
        "       b,\\\n"
        "    c\n"
        "even = x\\\\\n"
        "next = y\n"
        "# comment \\\n"
        "after = z\n"
        "hash = 1\\\n"
        "  # not a comment\n"
        "last = end\\"
    )
    v = pf.values()
    assert v["list"] == "a,b,c" and pf.props["list"].line == 1
    assert v["even"] == "x\\" and v["next"] == "y"  # an even number of backslashes does not continue
    assert v["after"] == "z"  # a comment line never continues
    assert v["hash"] == "1# not a comment"
    assert v["last"] == "end" and pf.props["after"].line == 7


def test_properties_escapes() -> None:
    pf = parse_properties(
        "tab = a\\tb\\nc\\rd\\fe\n"
        "uni = \\u00e9t\\u00C9\n"
        "back = C:\\\\dir\\\\x\n"
        "key\\=with\\:seps\\ sp = v\n"
        "\\ lead = w\n"
        "other = \\q\\=\\#\n"
        "regex = .*\\\\..*\n"
        "\\u0041B = unicode key\n"
    )
    v = pf.values()
    assert v["tab"] == "a\tb\nc\rd\fe"
    assert v["uni"] == "\u00e9t\u00c9"
    assert v["back"] == "C:\\dir\\x"
    assert v["key=with:seps sp"] == "v"
    assert v[" lead"] == "w"
    assert v["other"] == "q=#"
    assert v["regex"] == ".*\\..*"
    assert v["AB"] == "unicode key"


def test_properties_malformed_unicode_escape_names_line() -> None:
    with pytest.raises(ConfigError, match=r"^x\.properties:2: malformed \\uXXXX escape"):
        parse_properties("ok = 1\nbad = \\u12G4\n", "x.properties")


def test_properties_line_endings_bom_duplicates() -> None:
    pf = parse_properties("\ufeffa=1\r\nb=2\rc=3\na=4\n")
    assert pf.values() == {"a": "4", "b": "2", "c": "3"}
    assert pf.duplicates == [("a", 1, 4)]


def test_properties_encoding_utf8_then_latin1(tmp_path: Path) -> None:
    p = tmp_path / "u.properties"
    p.write_bytes("name = caf\u00e9 \u6570\u636e\n".encode())
    assert load_properties(p).get("name") == "caf\u00e9 \u6570\u636e"
    p.write_bytes("name = caf\u00e9\n".encode("iso-8859-1"))  # not valid UTF-8: read as Java would
    assert load_properties(p).get("name") == "caf\u00e9"
    with pytest.raises(ConfigError, match="no such file"):
        load_properties(tmp_path / "missing.properties")

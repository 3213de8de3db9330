"""The repository explains itself: its docs' links resolve inside it, and no tracked file points at a place on
one machine (an absolute home or workspace path) or at design notes kept outside the tree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# [text](target): a markdown link; external schemes and same-page anchors are not files
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_EXTERNAL = ("http://", "https://", "mailto:", "#")
# an absolute path into someone's machine (home directories, a workspace), not a runtime path such as /tmp or /proc
_MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:work|home|Users|root)/[\w.-]+")
# notes that live beside the repository, not in it
_OUTSIDE_NOTES = re.compile(r"\.\./shared/(?:DESIGN|reference)|DESIGN\.md|DESIGN invariant")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=REPO, capture_output=True, check=True)
    return [REPO / p for p in out.stdout.decode().split("\0") if p]


def _text_files() -> list[tuple[Path, str]]:
    """Tracked files that read as UTF-8 text, with their text (generated protobuf and binary data left out)."""
    files = []
    for p in _tracked():
        if not p.is_file() or p.suffix in {".jar", ".png", ".parquet", ".bin", ".gz"} or "_pb2" in p.name:
            continue
        try:
            files.append((p, p.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def markdown_links_outside(md: Path, root: Path = REPO) -> list[str]:
    """The links of one markdown file that do not resolve to a file or folder inside ``root``."""
    bad = []
    for target in _LINK.findall(md.read_text(encoding="utf-8")):
        if target.startswith(_EXTERNAL):
            continue
        path = target.split("#", 1)[0]
        resolved = (md.parent / path).resolve()
        if path.startswith("/") or not resolved.is_relative_to(root) or not resolved.exists():
            bad.append(f"{md.relative_to(root)}: {target}")
    return bad


def test_every_docs_link_resolves_inside_the_repository() -> None:
    mds = _tracked("*.md")
    assert any(p.name == "README.md" for p in mds) and any(p.parent.name == "docs" for p in mds)
    bad = [b for md in mds for b in markdown_links_outside(md)]
    assert bad == []


def test_the_link_check_catches_a_link_out_of_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "architecture.md").write_text("x", encoding="utf-8")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("x", encoding="utf-8")  # exists, but outside the tree
    md = root / "docs" / "page.md"
    md.write_text("[gone](no-such-page.md) [out](../../shared/DESIGN.md) [ok](architecture.md#1-the-data-path) "
                  "[web](https://example.org/x.md) [abs](/etc/hosts)\n", encoding="utf-8")
    assert markdown_links_outside(md, root) == ["docs/page.md: no-such-page.md", "docs/page.md: ../../shared/DESIGN.md",
                                                "docs/page.md: /etc/hosts"]


def test_no_tracked_file_names_a_machine_path_or_notes_outside_the_tree() -> None:
    hits = []
    for p, text in _text_files():
        if p == Path(__file__).resolve():
            continue  # this file spells the patterns it looks for
        for n, line in enumerate(text.splitlines(), 1):
            if _MACHINE_PATH.search(line) or _OUTSIDE_NOTES.search(line):
                hits.append(f"{p.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert hits == []


def test_the_path_patterns_match_what_they_are_meant_to() -> None:
    assert _MACHINE_PATH.search("see /work/shared/DESIGN.md") and _MACHINE_PATH.search("cd /home/alice/x")
    assert not _MACHINE_PATH.search("socket /tmp/canal-mariadb.sock, /proc/self/fd, $HOME/.cache/x, a/work/b")
    assert _OUTSIDE_NOTES.search("see DESIGN.md") and _OUTSIDE_NOTES.search("../shared/reference/x")
    assert not _OUTSIDE_NOTES.search("[canal-compat.md](canal-compat.md) §4, ../shared/fixtures")

"""Translation drift: book/zh/x.md and book/en/x.md record each other's body hash
(tools/book/translation.py). The repo must be in sync; a changed page must be caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "book" / "translation.py"
sys.path.insert(0, str(TOOL.parent))

import translation  # noqa: E402


def run_tool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def test_repo_pages_are_in_sync() -> None:
    problems = translation.check(REPO / "book")
    assert [str(p) for p in problems] == []
    assert len(translation.pages(REPO / "book")) >= 14
    proc = run_tool("check")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture()
def book_copy(tmp_path: Path) -> Path:
    root = tmp_path / "book"
    for lang in translation.LANGS:
        shutil.copytree(REPO / "book" / lang, root / lang)
    assert run_tool("accept", "--all", "--root", str(root)).returncode == 0
    assert translation.check(root) == []
    return root


def _append_to_body(page: Path, text: str) -> None:
    page.write_text(page.read_text("utf-8") + text, encoding="utf-8")


def test_changed_page_makes_its_counterpart_stale(book_copy: Path) -> None:
    zh = book_copy / "zh" / "knobs.md"
    _append_to_body(zh, "\n新增的一段话。\n")
    proc = run_tool("check", "--root", str(book_copy))
    assert proc.returncode == 1
    stale = [p for p in translation.check(book_copy)]
    assert [p.page.name for p in stale] == ["knobs.md"]
    assert stale[0].page.parts[-2] == "en" and "stale" in stale[0].message
    assert "en/knobs.md" in proc.stderr


def test_accept_after_translation_clears_the_drift(book_copy: Path) -> None:
    zh, en = book_copy / "zh" / "slo-loop.md", book_copy / "en" / "slo-loop.md"
    _append_to_body(zh, "\n新增的一段话。\n")
    _append_to_body(en, "\nA new paragraph.\n")
    assert {p.page.parts[-2] for p in translation.check(book_copy)} == {"zh", "en"}
    proc = run_tool("accept", str(en), "--root", str(book_copy))
    assert proc.returncode == 0, proc.stderr
    assert translation.check(book_copy) == []
    assert translation.read_record(en)["pair"] == "../zh/slo-loop.md"
    assert translation.read_record(en)["pair_sha"] == translation.body_sha(zh)


def test_front_matter_edits_are_not_drift(book_copy: Path) -> None:
    page = book_copy / "en" / "glossary.md"
    text = page.read_text("utf-8")
    page.write_text(text.replace("kernelspec:", "extra_key: 1\nkernelspec:", 1), "utf-8")
    assert translation.check(book_copy) == []


def test_missing_counterpart_and_missing_record_are_reported(book_copy: Path) -> None:
    (book_copy / "en" / "autodl.md").unlink()
    orphan = book_copy / "zh" / "new-page.md"
    orphan.write_text("---\nkernelspec: {name: python3}\n---\n# 新页\n", "utf-8")
    (book_copy / "en" / "new-page.md").write_text("# New page\n", "utf-8")
    messages = {f"{p.page.parts[-2]}/{p.page.name}": p.message
                for p in translation.check(book_copy)}
    assert "no counterpart" in messages["zh/autodl.md"]
    assert "no translation record" in messages["zh/new-page.md"]
    assert "no translation record" in messages["en/new-page.md"]


def test_write_record_keeps_the_rest_of_the_front_matter(tmp_path: Path) -> None:
    page = tmp_path / "zh" / "x.md"
    page.parent.mkdir()
    page.write_text("---\njupytext:\n  formats: md:myst\ntranslation:\n  pair: old\n"
                    "  pair_sha: 0\nkernelspec:\n  name: python3\n---\n# 标题\n", "utf-8")
    translation.write_record(page, "../en/x.md", "abcdef012345")
    fm, body = translation.split_front_matter(page.read_text("utf-8"))
    assert body == "# 标题\n"
    assert fm is not None and "formats: md:myst" in fm and "name: python3" in fm
    assert translation.read_record(page) == {"pair": "../en/x.md", "pair_sha": "abcdef012345"}

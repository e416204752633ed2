"""The two entry documents a learner opens first: README.md and labs/README.md.

README.md stays short (what the course is, the two commands, a first lab on a 4090, the CPU-only
path); the run findings live in the field notes. labs/README.md names only modules and files
that exist.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_WORDS = 1200
MODULE_RE = re.compile(r"\bcourse_utils(?:\.[A-Za-z_]\w*)+")
PATH_RE = re.compile(r"`((?:tools|tests|labs|src|book)/[\w./-]+\.(?:py|sh|md|ipynb|jsonl))`")


def words(text: str) -> int:
    return len(text.split())


def test_readme_is_within_its_word_limit() -> None:
    n = words((REPO / "README.md").read_text("utf-8"))
    assert 0 < n <= README_MAX_WORDS, f"README.md has {n} words, limit {README_MAX_WORDS}"


def test_readme_has_the_two_commands_a_first_lab_and_the_cpu_path() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    for must in ("make book", "make test", "labs/01_knob_sweep.ipynb", "-p lang zh", "preflight",
                 "pip install -r requirements.txt && pip install -e .", "capacity", "replay",
                 "quiz", "field-notes"):
        assert must in text, must
    assert "huggingface-cli" not in text  # gone from the huggingface_hub vLLM 0.26.0 pulls in


def resolve(name: str) -> object:
    """Import the longest importable prefix of a dotted name, then walk the attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the README names something gone
        return obj
    raise ModuleNotFoundError(name)


def test_resolve_fails_on_a_module_that_is_gone() -> None:
    assert resolve("course_utils.core.keep.judge")
    with pytest.raises(AttributeError):
        resolve("course_utils.labtools")
    with pytest.raises(AttributeError):
        resolve("course_utils.core.keep.no_such_function")


@pytest.mark.parametrize("doc", ["labs/README.md", "README.md"])
def test_every_module_a_readme_names_imports(doc: str) -> None:
    names = sorted(set(MODULE_RE.findall((REPO / doc).read_text("utf-8"))))
    if doc == "labs/README.md":
        assert len(names) >= 5, names
    for name in names:
        resolve(name)


@pytest.mark.parametrize("doc", ["labs/README.md", "README.md"])
def test_every_file_a_readme_names_exists(doc: str) -> None:
    text = (REPO / doc).read_text("utf-8")
    base = REPO / "labs" if doc == "labs/README.md" else REPO
    for rel in PATH_RE.findall(text):
        assert (REPO / rel).exists() or (base / rel).exists(), f"{doc} names {rel}"

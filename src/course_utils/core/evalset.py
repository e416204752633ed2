"""A small fixed eval set and its deterministic scorer (lab 01's quality leg).

Items are JSON lines: ``{"id", "lang", "kind", "question", "answer", "aliases"}``. An output
is correct when its first non-empty line, normalised (NFKC, case, punctuation, spaces), equals
the answer or an alias; or its last number equals a numeric answer; or it contains the answer
or an alias as a whole phrase (a Chinese one as a substring)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SYSTEM = {
    "en": "Answer with the final answer only: one word, name or number. No explanation.",
    "zh": "只回答最终答案：一个词、名称或阿拉伯数字，不要解释。",
}

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclass(frozen=True)
class Item:
    id: str
    lang: str
    question: str
    answer: str
    aliases: tuple[str, ...] = field(default_factory=tuple)
    kind: str = ""

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.answer, *self.aliases)

    @property
    def numeric(self) -> float | None:
        """The answer as a number, or None when it is not one."""
        text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", self.answer).strip())
        return float(text) if _NUMBER.fullmatch(text) else None


def load_items(path: str | Path) -> list[Item]:
    """Read a JSONL eval set; raises ValueError on a missing field or a repeated id."""
    items: list[Item] = []
    seen: set[str] = set()
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        missing = [k for k in ("id", "lang", "question", "answer") if not raw.get(k)]
        if missing:
            raise ValueError(f"{path}:{lineno}: missing {', '.join(missing)}")
        if raw["id"] in seen:
            raise ValueError(f"{path}:{lineno}: repeated id {raw['id']!r}")
        seen.add(raw["id"])
        fields = {k: str(raw.get(k, "")) for k in ("id", "lang", "question", "answer", "kind")}
        items.append(Item(**fields, aliases=tuple(str(a) for a in raw.get("aliases", []))))
    if not items:
        raise ValueError(f"{path}: no items")
    return items


def messages(item: Item) -> list[dict[str, str]]:
    """Chat messages for ``LLM.chat``: a short-answer instruction in the item's language."""
    system = _SYSTEM.get(item.lang, _SYSTEM["en"])
    return [{"role": "system", "content": system}, {"role": "user", "content": item.question}]


# ChatML's role headers and ends: under 10 tokens per message; a wide margin for two
CHAT_OVERHEAD_TOKENS = 64


def prompt_tokens_bound(items: Sequence[Item]) -> int:
    """An upper bound on any item's chat prompt tokens, with no tokenizer: a byte-level BPE
    spends at most one token per UTF-8 byte, plus CHAT_OVERHEAD_TOKENS."""
    if not items:
        raise ValueError("no items")
    return (
        max(sum(len(m["content"].encode()) for m in messages(it)) for it in items)
        + CHAT_OVERHEAD_TOKENS
    )


def normalize(text: str) -> str:
    """NFKC, lower case, punctuation and symbols to spaces (a decimal point is kept), one space."""
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text)).lower()
    out = []
    for i, ch in enumerate(text):
        cat = unicodedata.category(ch)
        keep_point = (
            ch == "." and 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
        )
        out.append(" " if cat[0] in "PSZC" and not keep_point else ch)
    return " ".join("".join(out).split())


def numbers(text: str) -> list[float]:
    """Every number in ``text`` (thousands separators removed), in order."""
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text))
    return [float(m) for m in _NUMBER.findall(text)]


def _first_line(output: str) -> str:
    return next((line.strip() for line in output.splitlines() if line.strip()), "")


def _contains(haystack: str, needle: str) -> bool:
    if not needle:
        return False
    pattern = r"(?<![a-z0-9])" + re.escape(needle) + r"(?![a-z0-9])"
    return re.search(pattern, haystack) is not None


def check(item: Item, output: str | None) -> bool:
    """Whether one model output answers ``item`` (rules in the module docstring)."""
    if not output:
        return False
    line = _first_line(output)
    got = normalize(line)
    if not got:
        return False
    accepted = [normalize(a) for a in item.accepted]
    if got in accepted:
        return True
    target = item.numeric
    if target is not None:
        found = numbers(line)
        if found and math.isclose(found[-1], target, rel_tol=1e-9, abs_tol=1e-9):
            return True
    return any(_contains(got, a) for a in accepted if _NUMBER.fullmatch(a) is None)


def score(
    items: Sequence[Item], outputs: Sequence[str | None] | Mapping[str, str | None]
) -> dict[str, Any]:
    """``{"accuracy", "n", "correct"}`` of ``outputs`` (aligned with ``items``, or keyed by
    item id); a missing output is wrong."""
    if not items:
        raise ValueError("no items to score")
    if not isinstance(outputs, Mapping) and len(outputs) != len(items):
        raise ValueError(f"{len(outputs)} outputs for {len(items)} items")
    aligned = [outputs.get(it.id) for it in items] if isinstance(outputs, Mapping) else outputs
    correct = sum(check(it, out) for it, out in zip(items, aligned, strict=True))
    return {"accuracy": correct / len(items), "n": len(items), "correct": correct}

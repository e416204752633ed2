"""The one JSONL store and the rule for reading recorded files.

``append_jsonl`` is the one writer (append + fsync; a writer killed mid-line never glues onto
the next record; non-finite floats are written as strings, so every line is strict JSON) and
``read_jsonl`` the one reader (a torn last line is ignored).

A recorded run (labs/results/, package examples) keeps its metric series and long logs
gzipped (tools/gpu/compress_results.py, ``gzip_file``); a live run writes them plain.
``resolve_path`` is the one rule every reader follows: the path, or its ``.gz`` twin when
only that exists; ``is_present`` and ``read_text`` build on it.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "GZ",
    "POINTS_FILE",
    "TUNE_FILE",
    "append_jsonl",
    "gzip_file",
    "is_present",
    "jsonable",
    "last_summary",
    "read_jsonl",
    "read_text",
    "resolve_path",
    "summarise_long_lists",
    "tune_summary",
]

GZ = ".gz"


def resolve_path(path: str | Path) -> Path:
    """The path, or its ``.gz`` twin when only that exists (the plain file wins); the
    path itself when neither exists, so a caller's "missing" handling is unchanged."""
    p = Path(path)
    if p.suffix == GZ or p.is_file():
        return p
    twin = p.with_name(p.name + GZ)
    return twin if twin.is_file() else p


def is_present(path: str | Path) -> bool:
    """Whether the file or its ``.gz`` twin exists."""
    return resolve_path(path).is_file()


def read_text(path: str | Path, errors: str = "strict") -> str:
    """The UTF-8 text of the file or of its gzipped twin; FileNotFoundError when neither."""
    p = resolve_path(path)
    if p.suffix == GZ:
        return gzip.decompress(p.read_bytes()).decode("utf-8", errors=errors)
    return p.read_text(encoding="utf-8", errors=errors)


def gzip_file(path: str | Path) -> Path:
    """Replace ``path`` by ``path.gz``: deterministic bytes (mtime 0, no file name in the
    header, OS byte "unknown"), so recording a run twice gives identical files."""
    p = Path(path)
    data = gzip.compress(p.read_bytes(), compresslevel=9, mtime=0)
    # byte 9 of the header names the OS; fix it so the bytes do not depend on the platform
    data = data[:9] + b"\xff" + data[10:]
    out = p.with_name(p.name + GZ)
    out.write_bytes(data)
    p.unlink()
    return out


def jsonable(v: Any) -> Any:
    """``v`` with non-finite floats as "inf"/"-inf"/"nan" and mappings/sequences walked."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if hasattr(v, "to_json"):
        return jsonable(v.to_json())
    return v


def append_jsonl(path: str | Path, record: Any) -> None:
    """Append one record (a mapping or a record with ``to_json``) as one line, fsync'd."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(jsonable(record), ensure_ascii=False, allow_nan=False) + "\n"
    with open(p, "a+b") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:  # a writer killed mid-line left no newline: do not glue onto it
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _numbers(v: Any) -> list[float]:
    if isinstance(v, list):
        return [x for e in v for x in _numbers(e)]
    return [float(v)] if isinstance(v, int | float) and not isinstance(v, bool) else []


def summarise_long_lists(record: dict[str, Any], max_bytes: int) -> bool:
    """Replace each list in ``record`` (vLLM's --save-detailed per-request lists) longer than
    ``max_bytes`` as JSON by {stripped_list, n, min, max, mean}, in place; True if any."""
    changed = False
    for k, v in list(record.items()):
        if isinstance(v, list) and len(json.dumps(v)) > max_bytes:
            nums = _numbers(v)
            record[k] = {"stripped_list": True, "n": len(v)}
            if nums:
                record[k].update(min=min(nums), max=max(nums), mean=sum(nums) / len(nums))
            changed = True
    return changed


# the two JSONL files of a sweep()/tune() run folder
POINTS_FILE = "points.jsonl"  # one ServedPoint per served point
TUNE_FILE = "tune.jsonl"  # tune(): one record per step, then a summary


def last_summary(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last ``"kind": "summary"`` record of a tune.jsonl (a resumed loop adds one)."""
    return next((r for r in reversed(steps) if r.get("kind") == "summary"), None)


def tune_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The summary a tune() run folder ended with; None before it ended."""
    return last_summary(read_jsonl(Path(run_dir) / TUNE_FILE))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (or its ``.gz`` twin); [] when it is missing; torn or
    blank lines are skipped."""
    if not is_present(path):
        return []
    out: list[dict[str, Any]] = []
    for line in read_text(path, errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


# a knee scan's records (one ServedPoint per rate; the last line of a rate wins)

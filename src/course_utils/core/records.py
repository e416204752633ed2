"""Records and the one JSONL store.

Every record a lab writes or a page reads is a dataclass here with ``to_json()`` /
``from_json()``. ``append_jsonl`` is the one writer (append + fsync; a writer killed
mid-line never glues onto the next record; non-finite floats are written as strings, so
every line is strict JSON) and ``read_jsonl`` the one reader (a torn last line is ignored).
``PointPaths`` is the folder layout of a served point.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PointPaths",
    "Workload",
    "append_jsonl",
    "jsonable",
    "read_jsonl",
]


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


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; [] when it is missing; torn or blank lines are skipped."""
    p = Path(path)
    if not p.is_file():
        return []
    out: list[dict[str, Any]] = []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


@dataclass(frozen=True)
class PointPaths:
    """The files of one served point: ``<results>/points/<key>/``."""

    dir: Path

    @classmethod
    def of(cls, results_dir: str | Path, key: str) -> PointPaths:
        return cls(Path(results_dir) / "points" / str(key))

    @property
    def server_log(self) -> Path:
        return self.dir / "serve.log"

    def bench_json(self, window: int = 0) -> Path:
        return self.dir / ("bench.json" if window == 0 else f"bench-w{window}.json")

    def bench_log(self, window: int = 0) -> Path:
        return self.dir / ("bench.log" if window == 0 else f"bench-w{window}.log")

    def metrics(self, window: int = 0) -> Path:
        return self.dir / ("metrics.jsonl" if window == 0 else f"metrics-w{window}.jsonl")

    @property
    def warmup_json(self) -> Path:
        return self.dir / "warmup.json"

    @property
    def warmup_log(self) -> Path:
        return self.dir / "warmup.log"


@dataclass(frozen=True)
class Workload:
    """What the client sends. `input_len` is the whole prompt, `prefix_len` of it shared."""

    input_len: int = 512
    output_len: int = 128
    num_prompts: int = 200
    request_rate: float = math.inf
    prefix_len: int = 0
    seed: int = 0
    ignore_eos: bool = False
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1 or self.num_prompts < 1:
            raise ValueError("input_len, output_len and num_prompts must be >= 1")
        if not 0 <= self.prefix_len < self.input_len:
            raise ValueError("prefix_len must be in [0, input_len)")
        if not self.request_rate > 0:
            raise ValueError("request_rate must be > 0 (inf = all at once)")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1 or None")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else float(self.request_rate)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Workload:
        d = dict(d)
        d["request_rate"] = float(d.get("request_rate", math.inf))
        return cls(**d)

    def key(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]



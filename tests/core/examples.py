"""Recorded examples from the real H200 lab run, for the tests.

Each example is one load from ``labs/results/h200-2026-11-29/``: the ``vllm bench serve``
result JSON (per-request lists over 16 KB summarised), the ``/metrics`` series sampled
during that load, and ``meta.json`` (knobs, offered rate, hardware, source path).

- ``queue_cap``: the SLO loop's baseline, max_num_seqs 64 at 55 req/s (queue behind the cap).
- ``prefill``: max_num_seqs 256 at 55 req/s (no queue; p99 TTFT still over the SLO).
- ``comfortable``: vLLM's defaults at 40 req/s (meets the SLO, nothing binds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core.metrics import Snapshot, load_series
from course_utils.core.slo import SLO, BenchResult

NAMES = ("queue_cap", "prefill", "comfortable")


@dataclass
class Example:
    name: str
    bench: BenchResult
    samples: list[Snapshot]
    meta: dict[str, Any]

    @property
    def slo(self) -> SLO:
        return SLO.parse(self.meta["slo"], rate=self.meta.get("offered_rate"))

    @property
    def max_num_seqs(self) -> int:
        return int(self.meta["max_num_seqs"])

    def label(self, lang: str = "en") -> str:
        m = self.meta
        knobs = ", ".join(f"{k}={v}" for k, v in m["knobs"].items())
        if lang == "zh":
            return (
                f"实测：{m['hardware']}，vLLM {m['vllm']}，{m['date']}，{knobs}，"
                f"压测 {m['offered_rate']} req/s（{m['source']}）"
            )
        return (
            f"measured: {m['hardware']}, vLLM {m['vllm']}, {m['date']}, {knobs}, "
            f"offered {m['offered_rate']} req/s ({m['source']})"
        )


def folder(name: str) -> Path:
    if name not in NAMES:
        raise ValueError(f"unknown example {name!r}: use one of {', '.join(NAMES)}")
    return Path(__file__).resolve().parents[2] / "src" / "course_utils" / "data" / "examples" / name


def load(name: str) -> Example:
    d = folder(name)
    return Example(
        name=name,
        bench=BenchResult.from_json(d / "bench.json"),
        samples=load_series(d / "metrics.jsonl"),
        meta=json.loads((d / "meta.json").read_text()),
    )

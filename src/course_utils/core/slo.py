"""SLOs, vLLM 0.26.0 benchmark results, and the two goodput scores.

* **per-request goodput** (vLLM's ``request_goodput``, ``vllm/benchmarks/serve.py``
  ``calculate_metrics``): completed requests whose own TTFT, TPOT and E2EL each meet the
  ``--goodput`` targets (only those three keys, ``check_goodput_args``), per second;
* **the p99 gate** (the SLO lesson's score): the request throughput if every p99 the SLO
  names meets its target, else 0. At a rate where 3 % of requests miss the TTFT target the
  gate says 0 while per-request goodput is still about 97 % of throughput.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SLO_KEYS = ("ttft", "tpot", "itl", "e2el")
VLLM_GOODPUT_KEYS = ("ttft", "tpot", "e2el")  # check_goodput_args: VALID_NAMES
# Keys every 0.26.0 `vllm bench serve --save-result` JSON of a generation benchmark has.
REQUIRED_KEYS = (
    "duration",
    "completed",
    "request_throughput",
    "output_throughput",
    "total_input_tokens",
    "total_output_tokens",
)


class SLOError(ValueError):
    """An SLO string or value that makes no sense."""


class BenchResultError(ValueError):
    """A file that is not a vLLM 0.26.0 `--save-result` JSON."""


@dataclass(frozen=True)
class SLO:
    """p99 targets in milliseconds, plus the offered rate (req/s) they must hold at."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2el_ms: float | None = None
    rate: float | None = None
    percentile: float = 99.0

    def __post_init__(self) -> None:
        for key in SLO_KEYS:
            v = getattr(self, f"{key}_ms")
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise SLOError(f"SLO {key} must be a positive number of ms, got {v}")
        if self.rate is not None and (not math.isfinite(self.rate) or self.rate <= 0):
            raise SLOError(f"SLO rate must be a positive req/s, got {self.rate}")
        if not 0 < self.percentile < 100:
            raise SLOError(f"SLO percentile must be in (0, 100), got {self.percentile}")
        if not self.targets():
            raise SLOError("an SLO needs at least one of ttft, tpot, itl, e2el")

    @classmethod
    def parse(cls, text: str, rate: float | None = None) -> SLO:
        """Parse ``"ttft:300 tpot:50"`` (the ``vllm bench serve --goodput`` syntax).

        Also accepts commas, and ``rate:20`` for the offered rate.
        """
        if not isinstance(text, str) or not text.strip():
            raise SLOError("empty SLO: write e.g. 'ttft:300 tpot:50' (milliseconds)")
        values: dict[str, float] = {}
        for pair in text.replace(",", " ").split():
            name, sep, raw = pair.partition(":")
            name = name.strip().lower()
            if not sep:
                raise SLOError(f"bad SLO item {pair!r}: write KEY:VALUE, e.g. ttft:300")
            if name not in (*SLO_KEYS, "rate"):
                raise SLOError(f"unknown SLO metric {name!r}: use ttft, tpot, itl, e2el or rate")
            try:
                value = float(raw)
            except ValueError:
                raise SLOError(f"SLO {name} value {raw!r} is not a number") from None
            if name in values:
                raise SLOError(f"SLO metric {name!r} given twice")
            values[name] = value
        r = values.pop("rate", rate)
        return cls(**{f"{k}_ms": v for k, v in values.items()}, rate=r)

    def targets(self) -> dict[str, float]:
        return {
            k: getattr(self, f"{k}_ms") for k in SLO_KEYS if getattr(self, f"{k}_ms") is not None
        }

    def goodput_args(self) -> list[str]:
        """Values for ``vllm bench serve --goodput`` (ITL is not a valid key there)."""
        return [f"{k}:{_num(v)}" for k, v in self.targets().items() if k in VLLM_GOODPUT_KEYS]

    def __str__(self) -> str:
        s = " ".join(f"{k}:{_num(v)}" for k, v in self.targets().items())
        return s + (f" @ {_num(self.rate)} req/s" if self.rate else "")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


@dataclass
class BenchResult:
    """A ``vllm bench serve --save-result`` JSON (0.26.0 keys), kept whole in ``raw``."""

    raw: dict[str, Any]
    path: str | None = None

    @classmethod
    def from_json(cls, source: str | Path | dict[str, Any]) -> BenchResult:
        path = None
        if isinstance(source, dict):
            data = source
        else:
            path = str(source)
            try:
                data = json.loads(Path(source).read_text())
            except FileNotFoundError:
                raise BenchResultError(f"{source}: no such file") from None
            except json.JSONDecodeError as e:
                raise BenchResultError(f"{source}: not JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(data, dict):
            raise BenchResultError(
                f"{path or 'result'}: not a vLLM result (top level is not an object)"
            )
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise BenchResultError(
                f"{path or 'result'}: not a vLLM 0.26.0 bench result (missing {', '.join(missing)})"
            )
        return cls(raw=data, path=path)

    def __getattr__(self, name: str) -> Any:
        raw = self.__dict__.get("raw", {})
        if name in raw:
            return raw[name]
        raise AttributeError(name)

    @property
    def failed(self) -> int:
        return int(self.raw.get("failed", 0) or 0)

    @property
    def request_rate(self) -> float:
        r = self.raw.get("request_rate", "inf")
        return float(r) if r is not None else math.inf

    def percentile(self, metric: str, p: float = 99.0) -> float | None:
        """``p{p}_{metric}_ms`` as vLLM saved it (None if that metric was not recorded)."""
        word = str(int(p)) if float(p).is_integer() else str(p)
        v = self.raw.get(f"p{word}_{metric}_ms")
        return None if v is None else float(v)

    def per_request(self) -> dict[str, np.ndarray] | None:
        """Per-request TTFT/TPOT/E2EL in ms, when the result was saved with --save-detailed."""
        ttfts, itls, olens = (self.raw.get(k) or [] for k in ("ttfts", "itls", "output_lens"))
        # lists summarised to keep recorded files small are dicts: nothing per request then
        if not all(isinstance(x, list) and x for x in (ttfts, itls, olens)):
            return None
        ok = [i for i, n in enumerate(olens) if n]  # failed requests have output_len 0
        ttft = np.array([ttfts[i] for i in ok]) * 1000
        e2el = np.array([ttfts[i] + sum(itls[i]) for i in ok]) * 1000
        n: Any = np.array([olens[i] for i in ok], dtype=np.float64)
        tpot = np.where(n > 1, (e2el - ttft) / np.maximum(n - 1, 1), 0.0)
        return {"ttft": ttft, "tpot": tpot, "e2el": e2el}


def check_complete(result: BenchResult) -> None:
    """A result worth scoring: at least one completed request, a positive duration, and
    per-request lists (when saved) with one entry per request. Raises BenchResultError."""
    where = result.path or "result"
    raw = result.raw
    for k in ("completed", "duration", "request_throughput"):
        x = raw.get(k)
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise BenchResultError(f"{where}: {k} is {x!r}, not a number")
    if raw["completed"] < 1:
        raise BenchResultError(f"{where}: completed is {raw['completed']}: no request finished")
    if raw["duration"] <= 0:
        raise BenchResultError(f"{where}: duration is {raw['duration']}, not > 0")
    n = int(raw["completed"]) + int(raw.get("failed") or 0)
    for k in ("ttfts", "itls", "output_lens", "input_lens"):
        x = raw.get(k)
        if isinstance(x, list) and len(x) != n:
            raise BenchResultError(
                f"{where}: {k} has {len(x)} entries for {n} requests (completed + failed)"
            )


@dataclass
class Score:
    gate_goodput: float  # the p99 gate: throughput if every p99 meets the SLO, else 0
    request_goodput: float | None  # vLLM's per-request goodput (req/s)
    request_throughput: float
    meets_slo: bool
    violations: list[str] = field(default_factory=list)
    request_goodput_source: str = "vllm"  # "vllm" (from JSON), "recomputed" or "none"

    def why_they_differ(self, lang: str = "en") -> str:
        g, r = self.gate_goodput, self.request_goodput
        if r is None:
            return (
                "这次结果没有 vLLM 的逐请求 goodput（跑 bench 时加 --goodput）。"
                if lang == "zh"
                else "No per-request goodput in this result (run the bench with --goodput)."
            )
        if lang == "zh":
            if not self.meets_slo and r > 0:
                return (
                    f"p99 门槛判 0（{'; '.join(self.violations)}），但仍有 {r:.2f} req/s 的请求"
                    "各自满足 SLO：vLLM 逐个数达标请求，门槛只看尾部分位。"
                )
            return f"两种分数接近（门槛 {g:.2f}，逐请求 {r:.2f} req/s）：尾部也达标时二者一致。"
        if not self.meets_slo and r > 0:
            return (
                f"The p99 gate scores 0 ({'; '.join(self.violations)}), yet {r:.2f} req/s "
                "of requests met every target one by one: vLLM counts good requests, the "
                "gate looks only at the tail percentile."
            )
        return (
            f"The scores agree (gate {g:.2f}, per-request {r:.2f} req/s): when the tail "
            "meets the SLO, almost every request does."
        )


def violations(result: BenchResult, slo: SLO) -> list[str]:
    out = []
    for key, target in slo.targets().items():
        v = result.percentile(key, slo.percentile)
        if v is None:
            out.append(f"p{_num(slo.percentile)} {key} not recorded")
        elif v > target:
            out.append(f"p{_num(slo.percentile)} {key.upper()} {v:.1f} ms > {_num(target)} ms")
    return out


def gate_goodput(result: BenchResult, slo: SLO) -> float:
    """Lesson 000's score: throughput if every p99 target holds, else 0."""
    return 0.0 if violations(result, slo) else float(result.request_throughput)


def _saved_goodput(result: BenchResult, slo: SLO) -> float | None:
    """``request_goodput`` from the JSON when its run used the same targets."""
    saved = result.raw.get("request_goodput")
    recorded = result.raw.get("goodput_slo")  # written by lab.bench next to vLLM's keys
    if saved is None:
        return None
    want = {k: float(v) for k, v in slo.targets().items() if k in VLLM_GOODPUT_KEYS}
    if recorded is not None and {k: float(v) for k, v in recorded.items()} != want:
        return None
    return float(saved)


def request_goodput(result: BenchResult, slo: SLO) -> float | None:
    """vLLM's per-request goodput for this SLO: the saved one (``_saved_goodput``), else
    recomputed vLLM's way (a request is good when ttft, tpot and e2el are each <= target)
    from the per-request lists saved with ``--save-detailed``."""
    saved = _saved_goodput(result, slo)
    if saved is not None:
        return saved
    per = result.per_request()
    if per is None:  # saved for other targets (or not at all) and nothing to recompute from
        return None
    good = np.ones(len(per["ttft"]), dtype=bool)
    for key, target in slo.targets().items():
        if key in VLLM_GOODPUT_KEYS:
            good &= per[key] <= target
    return float(good.sum()) / float(result.duration)


def score(result: BenchResult, slo: SLO) -> Score:
    v = violations(result, slo)
    rg = request_goodput(result, slo)
    src = "vllm" if _saved_goodput(result, slo) is not None else "recomputed"
    return Score(
        gate_goodput=0.0 if v else float(result.request_throughput),
        request_goodput=rg,
        request_throughput=float(result.request_throughput),
        meets_slo=not v,
        violations=v,
        request_goodput_source="none" if rg is None else src,
    )

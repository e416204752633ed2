"""Records: every record a lab writes or a page reads is a dataclass here with
``to_json()`` / ``from_json()``. The JSONL store (``core.store``) is importable from here too."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core.store import GZ as GZ
from course_utils.core.store import append_jsonl as append_jsonl
from course_utils.core.store import gzip_file as gzip_file
from course_utils.core.store import is_present as is_present
from course_utils.core.store import jsonable
from course_utils.core.store import read_jsonl as read_jsonl
from course_utils.core.store import read_text as read_text
from course_utils.core.store import resolve_path as resolve_path

KNEE_FILE = "knee.jsonl"


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


# --------------------------------------------------------------------------------------
# served points: one `vllm serve` process, a warm-up and one or more measured windows
# --------------------------------------------------------------------------------------

# the vLLM bench keys a window keeps (vllm/benchmarks/serve.py result JSON, 0.26.0)
BENCH_KEYS = (
    "duration",
    "completed",
    "failed",
    "num_prompts",
    "request_rate",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrent_requests",
    "total_output_tokens",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
)
BENCH_PERCENTILES = tuple(
    f"{p}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in ("mean", "p50", "p90", "p99")
)


def bench_summary(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a vLLM bench result a record keeps (per-request lists left out)."""
    out = {k: raw.get(k) for k in BENCH_KEYS}
    out.update({k: raw[k] for k in BENCH_PERCENTILES if k in raw})
    return out


@dataclass
class Scores:
    """A window's scores (course_utils.core.slo.score)."""

    gate_goodput: float
    request_goodput: float | None
    request_throughput: float
    meets_slo: bool
    violations: list[str] = field(default_factory=list)

    def objective(self, objective: str) -> float:
        v = self.gate_goodput if objective == "gate" else self.request_goodput
        return float(v or 0.0)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Scores:
        """From a record, or from ``vars()`` of a ``core.slo.Score`` (its extra fields left out)."""
        return cls(
            gate_goodput=float(d.get("gate_goodput") or 0.0),
            request_goodput=_opt_float(d.get("request_goodput")),
            request_throughput=float(d.get("request_throughput") or 0.0),
            meets_slo=bool(d.get("meets_slo")),
            violations=list(d.get("violations") or []),
        )


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass
class EngineWindow:
    """One engine's view of a window on a server with several engines (vLLM data
    parallelism): the load summary of its own /metrics series and the diagnosis on it."""

    load: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EngineWindow:
        return cls(load=dict(d.get("load") or {}), diagnosis=dict(d.get("diagnosis") or {}))


@dataclass
class Window:
    """One measured load on a running server: `vllm bench serve` with /metrics sampled.
    ``purpose``: "measure", "remeasure" (after an invalid one) or "repeat" (for the spread);
    ``log_span``: the server log's byte offsets during the window; ``engines``: each engine's
    load and diagnosis on a server with several (``diagnosis`` is then the deepest queue's)."""

    index: int
    purpose: str
    seed: int
    status: str
    reason: str | None = None
    valid: bool = False
    validity_issues: list[str] = field(default_factory=list)
    prefix_cache_hit_rate: float | None = None
    jit: list[dict[str, Any]] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    log_span: list[int] | None = None
    score: Scores | None = None
    bench: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float | None = None
    engines: dict[str, EngineWindow] = field(default_factory=dict)
    trace_token_ratio: float | None = None  # a trace's slice lengths were divided by this

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.engines:
            d.pop("engines")
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Window:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["score"] = Scores.from_json(d["score"]) if d.get("score") else None
        kw["engines"] = {
            str(e): EngineWindow.from_json(x) for e, x in (d.get("engines") or {}).items()
        }
        return cls(**kw)


@dataclass
class Warmup:
    """The warm-up before the first window (its own seed, the load's rate); its engine peak
    is what the windows' batch shapes are compared with."""

    seed: int
    num_prompts: int
    status: str
    reason: str | None = None
    running_max: float | None = None
    max_concurrent_requests: float | None = None
    jit: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float | None = None
    load_s: float | None = None  # vLLM's bench duration of the warm-up
    trace_token_ratio: float | None = None  # a trace's slice lengths were divided by this

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Warmup:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def relative_spread(values: Sequence[float | None]) -> float | None:
    """(max - min) / mean of the values that are not None: the run-to-run spread of repeated
    measurements; None with fewer than two."""
    vals = [float(v) for v in values if v is not None]
    if len(vals) < 2:
        return None
    mean = sum(vals) / len(vals)
    return (max(vals) - min(vals)) / mean if mean > 0 else 0.0


class PredatesWindows(ValueError):
    """A measured point recorded before points kept their windows: tools/migrate_records.py
    converts its folder once."""


@dataclass
class ServedPoint:
    """One configuration served by a fresh `vllm serve` and measured in windows: scored by
    the mean over its valid windows (none: it decides nothing). A knee rate is one too
    (``rate_key`` set). ``to_json`` also writes the deciding window's flat fields for the
    pages."""

    key: str
    knob: str
    value: Any
    knobs: dict[str, Any]
    workload: dict[str, Any]
    slo: str
    status: str
    reason: str | None = None
    tag: str | None = None
    model: str = ""
    base_knobs: dict[str, Any] = field(default_factory=dict)
    coupled: dict[str, Any] = field(default_factory=dict)
    rate_key: str | None = None
    serve_cmd: str = ""
    startup_s: float | None = None
    elapsed_s: float | None = None
    time: str = ""
    warmup: Warmup | None = None
    windows: list[Window] = field(default_factory=list)

    @property
    def label(self) -> str:
        """ "baseline", "knob=value", or a grid combo's own name (its value is None)."""
        if self.knob in (None, "baseline"):
            return "baseline"
        return self.knob if self.value is None else f"{self.knob}={self.value}"

    # ---- what decides -----------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == "ok" and any(w.ok for w in self.windows)

    @property
    def valid_windows(self) -> list[Window]:
        return [w for w in self.windows if w.ok and w.valid and w.score is not None]

    @property
    def valid(self) -> bool:
        return self.status == "ok" and bool(self.valid_windows)

    @property
    def deciding(self) -> Window | None:
        """The first valid window, else the last measured one (for display only)."""
        good = self.valid_windows
        if good:
            return good[0]
        done = [w for w in self.windows if w.ok]
        return done[-1] if done else None

    def objective(self, objective: str) -> float:
        """Mean over the valid windows (0 without one)."""
        vals = [w.score.objective(objective) for w in self.valid_windows if w.score]
        return sum(vals) / len(vals) if vals else 0.0

    def spread(self, objective: str) -> float | None:
        """(max - min) / mean over the valid windows; None with fewer than two."""
        return relative_spread(
            [w.score.objective(objective) for w in self.valid_windows if w.score]
        )

    @property
    def meets_slo(self) -> bool:
        good = self.valid_windows
        return bool(good) and all(w.score is not None and w.score.meets_slo for w in good)

    def scores(self) -> Scores | None:
        """The mean scores over the valid windows (the deciding window's when only one)."""
        good = [w.score for w in self.valid_windows if w.score]
        if not good:
            d = self.deciding
            return d.score if d else None
        n = len(good)
        rg = [s.request_goodput for s in good if s.request_goodput is not None]
        return Scores(
            gate_goodput=sum(s.gate_goodput for s in good) / n,
            request_goodput=sum(rg) / len(rg) if rg else None,
            request_throughput=sum(s.request_throughput for s in good) / n,
            meets_slo=all(s.meets_slo for s in good),
            violations=sorted({v for s in good for v in s.violations}),
        )

    @property
    def diagnosis(self) -> dict[str, Any]:
        d = self.deciding
        return d.diagnosis if d else {}

    @property
    def validity_issues(self) -> list[str]:
        """Why each invalid window was not used ("window 0: ...")."""
        return [f"window {w.index}: {i}" for w in self.windows for i in w.validity_issues]

    # ---- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in _NESTED}
        d["warmup"] = self.warmup.to_json() if self.warmup else None
        d["windows"] = [w.to_json() for w in self.windows]
        dec = self.deciding
        sc = self.scores()
        d.update(
            valid=self.valid,
            validity_issues=[] if self.valid else self.validity_issues,
            invalid_windows=[w.index for w in self.windows if not w.valid],
            score=sc.to_json() if sc else None,
            spread={o: self.spread(o) for o in ("request_goodput", "gate")},
            bench=dec.bench if dec else {},
            load=dec.load if dec else {},
            diagnosis=dec.diagnosis if dec else {},
            prefix_cache_hit_rate=dec.prefix_cache_hit_rate if dec else None,
        )
        if self.rate_key is not None:  # a knee rate: the flat keys the knee pages read
            b = d["bench"]
            d.update(
                rate=self.rate_key,
                request_throughput=sc.request_throughput if sc else None,
                request_goodput=sc.request_goodput if sc else None,
                gate_goodput=sc.gate_goodput if sc else None,
                meets_slo=self.meets_slo,
                violations=sc.violations if sc else [],
                output_throughput=b.get("output_throughput"),
                p99_ttft_ms=b.get("p99_ttft_ms"),
                p99_tpot_ms=b.get("p99_tpot_ms"),
                max_concurrent_requests=b.get("max_concurrent_requests"),
                server_startup_s=self.startup_s,
            )
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ServedPoint:
        if d.get("status") == "ok" and "windows" not in d:
            raise PredatesWindows("a measured point without windows (its form predates them)")
        p = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k not in _NESTED})
        p.warmup = Warmup.from_json(d["warmup"]) if d.get("warmup") else None
        p.windows = [Window.from_json(w) for w in d.get("windows") or []]
        return p


_NESTED = ("warmup", "windows")


def point_key(parts: Mapping[str, Any]) -> str:
    """Stable id of a point: a hash of everything that changes what is measured."""
    blob = json.dumps(jsonable(dict(parts)), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# offline points: lab 01's LLM(...) in a fresh process, the triple of one knob value
# --------------------------------------------------------------------------------------


@dataclass
class OfflinePoint:
    """One lab 01 point: start-up facts vLLM logged, quality on the eval set, speed and
    latency of the load pass; ``extra`` keeps the keys this class does not name."""

    key: str
    knobs: dict[str, Any]
    model: str
    status: str = "failed"
    reason: str | None = None
    knob: str | None = None
    value: Any = None
    load_format: str = "auto"
    max_model_len: int | None = None
    max_tokens: int | None = None
    load_max_tokens: int | None = None
    temperature: float = 0.0
    seed: int = 0
    started_at: str = ""
    wall_s: float | None = None
    log: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_len: int | None = None
    kv_cache_gib: float | None = None
    weights_gib: float | None = None
    torch_compile_s: float | None = None
    vllm_version: str | None = None
    startup_s: float | None = None
    eval_s: float | None = None
    eval_n: int | None = None
    eval_correct: int | None = None
    accuracy: float | None = None
    accuracy_note: str = ""
    load_prompts: int | None = None
    load_s: float | None = None
    output_tokens: int | None = None
    prompt_tokens_max: int | None = None
    prompt_tokens_total: int | None = None
    output_tok_s: float | None = None
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    latency_n: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def update(self, values: Mapping[str, Any]) -> None:
        for k, v in values.items():
            if k in self.__dataclass_fields__ and k != "extra":
                setattr(self, k, v)
            else:
                self.extra[k] = v

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        return {**d, **self.extra}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OfflinePoint:
        p = cls(
            key=str(d.get("key", "")),
            knobs=dict(d.get("knobs") or {}),
            model=str(d.get("model", "")),
        )
        p.update({k: v for k, v in d.items() if k not in ("key", "knobs", "model")})
        return p

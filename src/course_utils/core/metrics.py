"""vLLM 0.26.0 ``/metrics``: parse (prometheus_client's parser), sample under load, summarise.

Names are those ``PrometheusStatLogger`` declares (``vllm/v1/metrics/loggers.py``, labels
``model_name`` and ``engine``); counters end in ``_total``, histograms in
``_bucket``/``_sum``/``_count``. Series of several label sets are summed, except the KV-cache
usage (a fraction per engine: the fullest counts). With data parallelism a scrape also keeps
each engine's own values (``Snapshot.engines``). Gauges read after a load has drained are 0:
a diagnosis uses samples taken while the load runs (``MetricsSampler``).
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from course_utils.core import records

# Gauges
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"  # 0..1; was gpu_cache_usage_perc in older vLLM
# Counters (family names; samples end in _total)
PREEMPTIONS = "vllm:num_preemptions"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
REQUEST_SUCCESS = "vllm:request_success"
# Histograms (seconds)
QUEUE_TIME = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"

GAUGES = (WAITING, RUNNING, KV_USAGE)
# vllm/v1/metrics/loggers.py PrometheusStatLogger: labelnames = ["model_name", "engine"]
ENGINE_LABEL = "engine"
# gauges that are a fraction per engine: over several engines the largest counts, not the sum
MAX_OVER_LABELS = (KV_USAGE,)
COUNTERS = (
    PREEMPTIONS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    REQUEST_SUCCESS,
)
HISTOGRAMS = (QUEUE_TIME, PREFILL_TIME, DECODE_TIME, TTFT, ITL, TPOT, E2E)
# Tokens computed per engine step, a histogram PrometheusStatLogger declares in
# vllm/v1/metrics/loggers.py (0.26.0): prompt tokens computed + generated tokens.
ITERATION_TOKENS = "vllm:iteration_tokens_total"
# what each engine's own copy keeps (the course reads no other series per engine)
PER_ENGINE = frozenset((*GAUGES, *COUNTERS, *HISTOGRAMS, ITERATION_TOKENS))


class MetricsError(RuntimeError):
    """/metrics could not be read or parsed."""


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound, cumulative count), sorted
    sum: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """The observations made between ``earlier`` and this scrape."""
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        return Histogram(
            [(le, c - before.get(le, 0.0)) for le, c in self.buckets],
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Bucket-interpolated quantile, as PromQL's histogram_quantile does."""
        if not 0 <= q <= 1:
            raise ValueError("q must be in [0, 1]")
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        prev_le, prev_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return prev_le  # in the +Inf bucket: the highest finite bound
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return prev_le


class _Sums:
    """Values and histograms of one scrape, summed over the label sets added to it."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.hist: dict[str, dict[str, Any]] = {}

    def add(self, fam: Any, s: Any) -> None:
        if fam.type == "histogram":
            h = self.hist.setdefault(fam.name, {"b": {}, "sum": 0.0, "count": 0.0})
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                h["b"][le] = h["b"].get(le, 0.0) + s.value
            elif s.name.endswith("_sum"):
                h["sum"] += s.value
            elif s.name.endswith("_count"):
                h["count"] += s.value
        elif fam.type in ("gauge", "counter", "untyped") and not s.name.endswith("_created"):
            name = fam.name if fam.type == "counter" else s.name
            if name in MAX_OVER_LABELS and name in self.values:
                self.values[name] = max(self.values[name], s.value)
            else:
                self.values[name] = self.values.get(name, 0.0) + s.value

    def snapshot(self, t: float) -> Snapshot:
        return Snapshot(
            t=t,
            values=dict(self.values),
            histograms={
                n: Histogram(sorted(h["b"].items()), h["sum"], h["count"])
                for n, h in self.hist.items()
            },
        )


@dataclass
class Snapshot:
    """One scrape: gauges and counters summed over label sets, histograms merged.
    ``engines``: each engine's own snapshot (of the series in ``PER_ENGINE``), when the
    scrape has more than one engine."""

    t: float
    values: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    engines: dict[str, Snapshot] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, t: float | None = None) -> Snapshot:
        t = time.time() if t is None else t
        try:
            families = list(text_string_to_metric_families(text))
        except Exception as e:  # the parser raises ValueError and friends
            raise MetricsError(f"not Prometheus text: {e}") from None
        total = _Sums()
        per: dict[str, _Sums] = {}
        for fam in families:
            for s in fam.samples:
                total.add(fam, s)
                eng = s.labels.get(ENGINE_LABEL)
                if eng is not None and fam.name in PER_ENGINE:
                    per.setdefault(str(eng), _Sums()).add(fam, s)
        snap = total.snapshot(t)
        if len(per) > 1:
            snap.engines = {e: per[e].snapshot(t) for e in sorted(per, key=_engine_order)}
        return snap

    def gauge(self, name: str) -> float | None:
        return self.values.get(name)

    counter = gauge

    def histogram(self, name: str) -> Histogram | None:
        return self.histograms.get(name)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "t": self.t,
            "values": self.values,
            "histograms": {
                k: {
                    "buckets": [[_le(le), c] for le, c in h.buckets],
                    "sum": h.sum,
                    "count": h.count,
                }
                for k, h in self.histograms.items()
            },
        }
        if self.engines:
            d["engines"] = {e: s.to_dict() for e, s in self.engines.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        return cls(
            t=float(d["t"]),
            values={k: float(v) for k, v in d["values"].items()},
            histograms={
                k: Histogram(
                    [(float(le), float(c)) for le, c in h["buckets"]],
                    float(h["sum"]),
                    float(h["count"]),
                )
                for k, h in d.get("histograms", {}).items()
            },
            engines={e: cls.from_dict(x) for e, x in (d.get("engines") or {}).items()},
        )


def _engine_order(label: str) -> tuple[int, str]:
    return (int(label), "") if label.isdigit() else (1 << 30, label)


def engine_series(samples: Sequence[Snapshot]) -> dict[str, list[Snapshot]]:
    """Each engine's own series ("0", "1", ...), from samples of a server with more than one
    engine; {} for a single engine (its series is ``samples`` itself). A sample that lacks
    an engine (a scrape before it reported) is left out of that engine's series."""
    names: list[str] = []
    for s in samples:
        names += [e for e in s.engines if e not in names]
    return {
        e: [s.engines[e] for s in samples if e in s.engines]
        for e in sorted(names, key=_engine_order)
    }


def _le(x: float) -> float | str:
    return "+Inf" if math.isinf(x) else x


def scrape(url: str, timeout: float = 2.0) -> Snapshot:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError as e:
        raise MetricsError(f"cannot read {url}: {e}") from None
    return Snapshot.parse(text)


class MetricsSampler:
    """Scrape ``/metrics`` every ``interval_s`` in a background thread while a load runs."""

    def __init__(self, metrics_url: str, interval_s: float = 0.5, timeout_s: float = 2.0):
        self.url = metrics_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[Snapshot] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.samples.append(scrape(self.url, self.timeout_s))
            except MetricsError as e:
                self.errors.append(str(e))
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def __enter__(self) -> MetricsSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1)

    def save_jsonl(self, path: str | Path) -> Path:
        return save_series(self.samples, path)


def save_series(samples: Iterable[Snapshot], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w") as f:
        for s in samples:
            f.write(json.dumps(s.to_dict(), separators=(",", ":")) + "\n")
    return p


def load_series(path: str | Path) -> list[Snapshot]:
    """The series at ``path`` (or its recorded ``.gz`` twin, records.read_text)."""
    lines = records.read_text(path).splitlines()
    return [Snapshot.from_dict(json.loads(line)) for line in lines if line.strip()]


def under_load(samples: Sequence[Snapshot]) -> list[Snapshot]:
    """The samples taken while requests were running or waiting."""
    return [s for s in samples if (s.gauge(RUNNING) or 0) > 0 or (s.gauge(WAITING) or 0) > 0]


@dataclass
class LoadSummary:
    n_samples: int
    n_under_load: int
    waiting_mean: float
    waiting_max: float
    waiting_frac: float  # fraction of under-load samples with a queue
    running_mean: float
    running_max: float
    kv_usage_mean: float
    kv_usage_max: float
    preemptions: float
    queue_time_mean_s: float | None
    prefill_time_mean_s: float | None
    decode_time_mean_s: float | None
    ttft_mean_s: float | None
    ttft_p99_s: float | None
    itl_mean_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarize(samples: Sequence[Snapshot]) -> LoadSummary:
    """Gauges over the under-load samples; histograms and counters as first-to-last deltas."""
    load = under_load(samples)

    def stats(name: str) -> tuple[float, float]:
        xs = [s.gauge(name) or 0.0 for s in load]
        return (sum(xs) / len(xs), max(xs)) if xs else (0.0, 0.0)

    w_mean, w_max = stats(WAITING)
    r_mean, r_max = stats(RUNNING)
    k_mean, k_max = stats(KV_USAGE)
    first, last = (samples[0], samples[-1]) if samples else (None, None)

    def delta(name: str) -> Histogram | None:
        if last is None or name not in last.histograms:
            return None
        return last.histograms[name].minus(first.histograms.get(name) if first else None)

    def mean(name: str) -> float | None:
        h = delta(name)
        return h.mean if h else None

    ttft = delta(TTFT)
    pre = 0.0
    if first is not None and last is not None:
        pre = (last.gauge(PREEMPTIONS) or 0.0) - (first.gauge(PREEMPTIONS) or 0.0)
    return LoadSummary(
        n_samples=len(samples),
        n_under_load=len(load),
        waiting_mean=w_mean,
        waiting_max=w_max,
        waiting_frac=(
            sum(1 for s in load if (s.gauge(WAITING) or 0) > 0) / len(load) if load else 0.0
        ),
        running_mean=r_mean,
        running_max=r_max,
        kv_usage_mean=k_mean,
        kv_usage_max=k_max,
        preemptions=pre,
        queue_time_mean_s=mean(QUEUE_TIME),
        prefill_time_mean_s=mean(PREFILL_TIME),
        decode_time_mean_s=mean(DECODE_TIME),
        ttft_mean_s=ttft.mean if ttft else None,
        ttft_p99_s=ttft.quantile(0.99) if ttft else None,
        itl_mean_s=mean(ITL),
    )

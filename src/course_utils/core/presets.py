"""Named workloads, one per constraint the SLO loop must handle (data only): a workload, an
SLO, the base knobs, the loop's candidates and what the loop is expected to do. Two sizes:
"4090" (one RTX 4090, lab 02's defaults) and "h200" (one H200, the recorded runs). Rates are
starting points placed by the labs' measurements and knee scans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["GPUS", "PRESETS", "Preset", "get", "lab02_params", "names"]

GPUS = ("4090", "h200")


@dataclass(frozen=True)
class Preset:
    """A workload the loop runs from vLLM's defaults (plus ``base``)."""

    name: str
    gpu: str
    constraint: str  # what should bind: prefill | decode | kv | queue | prefix
    input_len: int
    output_len: int
    num_prompts: int
    rate: float
    slo: str
    prefix_len: int = 0
    base: Mapping[str, Any] = field(default_factory=dict)
    candidates: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    expect: str = ""
    recorded: str | None = None  # labs/results/<run>/<folder> that measured this preset
    rehearse: str | None = None  # run at this GPU's budget and defaults (lab.rehearsal)
    # the warm-up's prompts as a share of the load's (None: lab.measure's default); 1.0 where
    # concurrency keeps growing, or the window fails the warm-up rule
    warmup_share: float | None = None

    def workload_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of core.records.Workload (seed 0, ignore_eos)."""
        return {
            "input_len": self.input_len,
            "output_len": self.output_len,
            "num_prompts": self.num_prompts,
            "request_rate": float(self.rate),
            "prefix_len": self.prefix_len,
            "ignore_eos": True,
        }

    def grid_spec(self) -> str:
        """The candidates as lab.grid's one-at-a-time spec (``K=V1,V2 + K2=...``): the same
        points the loop can measure, vLLM's defaults included."""
        return " + ".join(
            f"{k}={','.join(str(v) for v in vs)}" for k, vs in self.candidates.items()
        )

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["base"] = dict(self.base)
        d["candidates"] = {k: list(v) for k, v in self.candidates.items()}
        return d


def _p(**kw: Any) -> Preset:
    """A preset: every one serves 4096-token contexts; an H200 one warms up with all prompts."""
    kw["base"] = MappingProxyType({"max_model_len": 4096})
    kw["candidates"] = MappingProxyType({k: tuple(v) for k, v in kw["candidates"].items()})
    kw.setdefault("warmup_share", 1.0 if kw["gpu"] == "h200" else None)
    return Preset(**kw)


def _load(
    num_prompts: int, rate: float, slo: str, candidates: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """One size's load, SLO and candidates (and any field it sets apart from the other)."""
    return dict(num_prompts=num_prompts, rate=rate, slo=slo, candidates=candidates, **extra)


def _sizes(four: dict[str, Any], h200: dict[str, Any], **shared: Any) -> tuple[Preset, ...]:
    """One workload (``shared``) at both sizes."""
    return _p(**{"gpu": "4090", **shared, **four}), _p(**{"gpu": "h200", **shared, **h200})


_ALL = (
    # prefill: long prompts, a tight TTFT target
    *_sizes(
        _load(60, 1.5, "ttft:1000 tpot:100", {"max_num_batched_tokens": (4096, 8192)}),
        _load(200, 10, "ttft:300 tpot:50", {"max_num_batched_tokens": (16384, 32768)}),
        name="prefill",
        constraint="prefill",
        input_len=3072,
        output_len=64,
        expect="prefill binds (TTFT); a larger max_num_batched_tokens may keep",
    ),
    # decode: the recorded H200 run
    *_sizes(
        _load(
            num_prompts=60,
            rate=2,
            slo="ttft:2000 tpot:40",
            candidates={"max_num_batched_tokens": (1024,), "max_num_seqs": (32, 64)},
            expect="decode binds (TPOT); candidates tie or lose: a plateau",
        ),
        _load(
            num_prompts=150,
            rate=12,
            slo="ttft:2000 tpot:15",
            candidates={"max_num_batched_tokens": (2048, 4096), "max_num_seqs": (128, 256)},
            expect="decode binds (TPOT); every candidate ties: a plateau at the defaults",
            recorded="h200-2026-11-30/decode12",
        ),
        name="decode",
        constraint="decode",
        input_len=3072,
        output_len=256,
    ),
    # kv: long outputs at a high rate; an H200's own pool cannot fill, so its case rehearses a
    # 4090's (field notes)
    *_sizes(
        _load(
            num_prompts=120,
            rate=4,
            slo="ttft:1000 tpot:60",
            candidates={"kv_cache_dtype": ("fp8",), "max_num_seqs": (64, 128)},
            expect="the KV pool binds (preemptions); fp8 KV or fewer sequences may keep",
        ),
        _load(
            num_prompts=300,
            rate=20,
            slo="ttft:1000 tpot:30",
            candidates={"gpu_memory_utilization": (0.95,), "kv_cache_dtype": ("fp8",)},
            expect="the 4090's KV pool binds (a queue with the pool full); a larger pool "
            "or fp8 KV keeps",
            rehearse="rtx4090",
        ),
        name="kv",
        constraint="kv",
        input_len=512,
        output_len=1024,
    ),
    # knee: a rate past the knee, not a tuning problem; past one H200's knee every request is
    # admitted, so the overload shows as TTFT
    *_sizes(
        _load(200, 20, "ttft:300 tpot:50", {"max_num_seqs": (128, 384)}),
        _load(600, 80, "ttft:300 tpot:50", {"max_num_batched_tokens": (16384, 32768)}),
        name="knee",
        constraint="queue",
        input_len=512,
        output_len=128,
        expect="past the knee: no knob meets the SLO; the loop ends 'past the knee'",
    ),
    # prefix: a shared prefix, prefix caching on (vLLM's default) vs off
    *_sizes(
        _load(80, 2, "ttft:500 tpot:50", {"enable_prefix_caching": (False,)}),
        _load(300, 15, "ttft:300 tpot:30", {"enable_prefix_caching": (False,)}),
        name="prefix",
        constraint="prefix",
        input_len=3072,
        output_len=128,
        prefix_len=2048,
        expect="prefix caching (on by default) serves the shared prefix; off loses",
    ),
)
PRESETS: Mapping[tuple[str, str], Preset] = MappingProxyType({(p.name, p.gpu): p for p in _ALL})


def names() -> list[str]:
    return sorted({n for n, _ in PRESETS})


def get(name: str, gpu: str = "4090") -> Preset:
    """A preset by name and GPU size ("4090", "h200"); a clear one-line error otherwise."""
    g = gpu.lower().replace("rtx", "").replace("nvidia-", "").split("-")[0]
    if (name, g) not in PRESETS:
        if name not in names():
            raise KeyError(f"no preset {name!r}: one of {', '.join(names())}")
        raise KeyError(f"preset {name!r} has no {gpu!r} size: one of {', '.join(GPUS)}")
    return PRESETS[(name, g)]


LAB02_SECOND = {"max_num_seqs": "max_num_batched_tokens"}  # a second knob with no values


def lab02_params(p: Preset) -> dict[str, Any]:
    """Lab 02's parameters for a preset: the workload, SLO, base knobs and the first and
    second knob's candidates (a one-knob preset leaves the second knob without values), and
    ``rehearse_gpu`` when the preset rehearses a smaller GPU."""
    knobs_ = list(p.candidates)
    first = knobs_[0]
    second = knobs_[1] if len(knobs_) > 1 else LAB02_SECOND.get(first, "max_num_seqs")
    base = dict(p.base)
    rehearse = {"rehearse_gpu": p.rehearse} if p.rehearse else {}
    return {
        **rehearse,
        "input_len": p.input_len,
        "output_len": p.output_len,
        "prefix_len": p.prefix_len,
        "num_prompts": p.num_prompts,
        "rate": float(p.rate),
        "slo": p.slo,
        "max_model_len": int(base.pop("max_model_len", 4096)),
        "base_knobs": base,
        "knob": first,
        "candidates": list(p.candidates[first]),
        "second_knob": second,
        "second_candidates": list(p.candidates.get(second, ())),
    }

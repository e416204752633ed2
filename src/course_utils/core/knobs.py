"""The direction map: every tuning knob of vLLM 0.26.0, written once.

Each record says which flag, ``LLM(...)`` kwarg and config field a knob is, the default
a user really gets, and which way the move pushes throughput, TTFT and ITL/TPOT.
Directions are facts about the mechanism; magnitudes are for your own sweep.

Sources (vLLM 0.26.0 wheel):
- defaults by GPU memory and entry point: ``EngineArgs.get_batch_defaults`` in
  ``vllm/engine/arg_utils.py`` (>= 70 GiB and not A100: 1024 seqs, 8192 / 16384 tokens
  for serve / LLM; otherwise 256 seqs, 2048 / 8192 tokens).
- ``CacheConfig`` (``vllm/config/cache.py``): ``gpu_memory_utilization = Field(0.92, gt=0,
  le=1)``, ``cache_dtype`` (flag ``--kv-cache-dtype``), ``enable_prefix_caching``.
- ``SchedulerConfig`` (``vllm/config/scheduler.py``): ``max_num_seqs``,
  ``max_num_batched_tokens``, ``enable_chunked_prefill``; it raises
  ``max_num_batched_tokens (X) must be greater than or equal to max_num_seqs (Y).``
- ``ModelConfig`` (``vllm/config/model.py``): ``max_model_len`` (``Field(None, ge=-1)``;
  ``-1``/``auto`` fit the longest context memory allows, parsed by
  ``human_readable_int_or_auto`` in ``vllm/utils/argparse_utils.py``), ``quantization``
  (``None`` reads the checkpoint's ``quantization_config``), ``enforce_eager``;
  ``ParallelConfig.tensor_parallel_size``; ``SpeculativeConfig``.

An effect that holds only under a condition carries it in ``Knob.when``; the book's table and
``recommend`` both read it, so they cannot disagree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Effect = Literal["better", "worse", "neutral", "depends"]
Group = Literal["capacity", "batch_shape", "reuse_latency", "scale"]
Constraint = Literal["queue", "prefill", "decode", "kv", "none"]
Entry = Literal["serve", "llm"]
Lang = Literal["zh", "en"]

GIB = 1024**3
LARGE_GPU_GIB = 70  # get_batch_defaults: device_memory >= 70 * GiB_bytes and not A100


class KnobError(ValueError):
    """A knob name, value or combination that vLLM 0.26.0 would reject."""


@dataclass(frozen=True)
class Knob:
    name: str  # the LLM(...) kwarg, also our key
    flag: str  # the `vllm serve` flag
    config: str  # config dataclass.field as named in 0.26.0
    source: str  # file in the 0.26.0 wheel that declares it
    group: Group
    value_type: str  # float | int | bool | str | json
    move: dict[str, str]  # the move the effects describe, zh/en
    throughput: Effect
    ttft: Effect
    itl: Effect  # ITL and TPOT move together unless `note` says otherwise
    relieves: dict[str, str]  # constraint -> which way to turn it for that constraint
    label: dict[str, str]
    trade: dict[str, str]
    note: dict[str, str] = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    free_win: bool = False
    # metric ("throughput" | "ttft" | "itl") -> the condition its effect needs, zh/en
    when: dict[str, dict[str, str]] = field(default_factory=dict)
    # the opposite move, when it is a real choice (its effects are the inverse ones)
    reverse: dict[str, str] = field(default_factory=dict)

    @property
    def kwarg(self) -> str:
        return self.name

    def text(self, what: str, lang: Lang = "en") -> str:
        return getattr(self, what)[lang]

    def effect(self, metric: str) -> Effect:
        return getattr(self, METRIC_ATTR[metric])

    def condition(self, metric: str, lang: Lang = "en") -> str:
        """The condition the effect on ``metric`` needs ('' when it always holds)."""
        return self.when.get(METRIC_ATTR[metric], {}).get(lang, "")


METRIC_ATTR: dict[str, str] = {
    "throughput": "throughput",
    "ttft": "ttft",
    "itl": "itl",
    "tpot": "itl",
}
INVERSE: dict[str, Effect] = {
    "better": "worse",
    "worse": "better",
    "neutral": "neutral",
    "depends": "depends",
}


# `CacheDType` in vllm/config/cache.py (0.26.0)
CACHE_DTYPES: tuple[str, ...] = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
)
# `QuantizationMethods` in vllm/model_executor/layers/quantization/__init__.py (0.26.0)
QUANTIZATION_METHODS: tuple[str, ...] = (
    "awq",
    "auto_awq",
    "fp8",
    "fbgemm_fp8",
    "fp_quant",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "auto_gptq",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "humming",
    "compressed-tensors",
    "bitsandbytes",
    "experts_int8",
    "quark",
    "moe_wna16",
    "torchao",
    "inc",
    "mxfp4",
    "gpt_oss_mxfp4",
    "deepseek_v4_fp8",
    "online",
    "fp8_per_tensor",
    "fp8_per_block",
    "fp8_per_channel",
    "int8_per_channel_weight_only",
    "nvfp4_per_token",
    "mxfp8",
)
KV_WAIT = {"en": "only when requests wait for KV space", "zh": "仅当请求在等 KV 空间时"}
KV_BOUND = {"en": "only while the KV cache limits the batch", "zh": "仅当 KV cache 限制了批大小时"}


def _k(**kw: Any) -> Knob:
    return Knob(**kw)


_KNOBS: list[Knob] = [
    _k(
        name="gpu_memory_utilization",
        flag="--gpu-memory-utilization",
        config="CacheConfig.gpu_memory_utilization",
        source="vllm/config/cache.py",
        group="capacity",
        value_type="float",
        move={"en": "raise", "zh": "调高"},
        throughput="better",
        ttft="better",
        itl="neutral",
        relieves={"kv": "raise"},
        label={"en": "GPU memory fraction for the engine", "zh": "引擎可用显存比例"},
        trade={
            "en": "less headroom: start-up OOM, nothing left for other processes",
            "zh": "余量变小：启动时 OOM，其他进程没显存可用",
        },
        note={
            "en": "More KV blocks, so a larger running batch and less waiting for KV; "
            "TTFT improves only when requests were queueing for KV.",
            "zh": "KV block 变多，运行批更大、排队等 KV 的时间变短；只有在请求确实在等 KV 时 TTFT 才会改善。",
        },
        when={"throughput": KV_BOUND, "ttft": KV_WAIT},
    ),
    _k(
        name="quantization",
        flag="--quantization",
        config="ModelConfig.quantization",
        source="vllm/config/model.py",
        group="capacity",
        value_type="str",
        move={"en": "4-bit weights (AWQ/GPTQ) or fp8", "zh": "4 bit 权重（AWQ/GPTQ）或 fp8"},
        throughput="better",
        ttft="depends",
        itl="better",
        relieves={"kv": "enable", "decode": "enable"},
        label={"en": "weight quantization", "zh": "权重量化"},
        trade={
            "en": "some output quality (measure it on the eval set)",
            "zh": "一些输出质量（在评测集上测）",
        },
        note={
            "en": "Fewer weight bytes per decode step and more memory left for KV. Prefill is "
            "compute-bound, so TTFT can get slower with dequantising kernels at large batch. "
            "Needs a quantized checkpoint (or an online method such as fp8): with an AWQ "
            "checkpoint, quantization=None already reads its quantization_config, so "
            "'on/off' is a choice between checkpoints, not a flag.",
            "zh": "每个 decode 步读的权重字节更少，也给 KV 腾出显存。prefill 受算力限制，大批量时反量化内核可能让 TTFT 变慢。"
            "它需要量化好的 checkpoint（或 fp8 这类在线量化）：AWQ checkpoint 在 quantization=None 时"
            "就会按其 quantization_config 自动识别，所以“开/关量化”是在两个 checkpoint 之间选，不是一个开关。",
        },
        choices=QUANTIZATION_METHODS,
        free_win=True,
        when={
            "throughput": KV_BOUND,
            "itl": {
                "en": "most at small batch, where decode is bound by memory bandwidth",
                "zh": "小批量时最明显（此时 decode 受显存带宽限制）",
            },
        },
    ),
    _k(
        name="kv_cache_dtype",
        flag="--kv-cache-dtype",
        config="CacheConfig.cache_dtype",
        source="vllm/config/cache.py",
        group="capacity",
        value_type="str",
        move={"en": "fp8", "zh": "改成 fp8"},
        throughput="better",
        ttft="better",
        itl="neutral",
        relieves={"kv": "fp8"},
        label={"en": "KV cache data type", "zh": "KV cache 数据类型"},
        trade={"en": "some KV precision (check quality)", "zh": "一点 KV 精度（检查质量）"},
        note={
            "en": "Half the bytes per KV token, so about twice the KV tokens in the same memory. "
            "Like every capacity knob it helps TTFT only when requests wait for KV. "
            "The config field is cache_dtype; the flag is --kv-cache-dtype.",
            "zh": "每个 KV token 的字节减半，同样显存约能装两倍 KV token。和所有容量旋钮一样，只有请求在等 KV 时才改善 TTFT。config 字段叫 cache_dtype，flag 叫 --kv-cache-dtype。",
        },
        choices=CACHE_DTYPES,
        when={"throughput": KV_BOUND, "ttft": KV_WAIT},
    ),
    _k(
        name="max_model_len",
        flag="--max-model-len",
        config="ModelConfig.max_model_len",
        source="vllm/config/model.py",
        group="capacity",
        value_type="int",
        move={"en": "lower", "zh": "调低"},
        throughput="neutral",
        ttft="neutral",
        itl="neutral",
        relieves={},
        label={"en": "maximum context length per request", "zh": "单请求最大上下文长度"},
        trade={
            "en": "longer requests are rejected (not truncated, unless the request sets "
            "truncate_prompt_tokens)",
            "zh": "更长的请求会被拒绝（不会截断，除非请求设置了 truncate_prompt_tokens）",
        },
        note={
            "en": "V1 allocates KV blocks per computed token, so lowering it does not let more "
            "requests fit; it only matters at start-up, which fails if one max-length "
            "request cannot fit. -1 or 'auto' picks the longest length that fits.",
            "zh": "V1 按实际计算的 token 分配 KV block，调低它并不能让更多请求同时装下；它只在启动时起作用："
            "若一个满长度请求都放不下，启动就失败。-1 或 'auto' 让 vLLM 选能装下的最长长度。",
        },
    ),
    _k(
        name="max_num_seqs",
        flag="--max-num-seqs",
        config="SchedulerConfig.max_num_seqs",
        source="vllm/config/scheduler.py",
        group="batch_shape",
        value_type="int",
        move={"en": "raise", "zh": "调高"},
        throughput="better",
        ttft="better",
        itl="worse",
        relieves={"queue": "raise", "decode": "lower"},
        label={"en": "maximum running requests per step", "zh": "每步最多运行的请求数"},
        trade={
            "en": "TPOT/ITL rise as the decode batch grows; more KV pressure",
            "zh": "decode 批变大，TPOT/ITL 上升；KV 压力变大",
        },
        note={
            "en": "Raising it admits waiting requests sooner (TTFT better) only while the cap "
            "is what holds them; must stay <= max_num_batched_tokens.",
            "zh": "只有当请求是被这个上限挡住时，调高才会让它们更早进场（TTFT 变好）；必须 <= max_num_batched_tokens。",
        },
        when={
            "throughput": {
                "en": "until the GPU's compute is saturated",
                "zh": "直到 GPU 算力饱和为止",
            },
            "ttft": {"en": "only when requests queue for a slot", "zh": "仅当请求在排队等名额时"},
        },
        reverse={"en": "lower", "zh": "调低"},
    ),
    _k(
        name="max_num_batched_tokens",
        flag="--max-num-batched-tokens",
        config="SchedulerConfig.max_num_batched_tokens",
        source="vllm/config/scheduler.py",
        group="batch_shape",
        value_type="int",
        move={"en": "raise", "zh": "调高"},
        throughput="better",
        ttft="better",
        itl="worse",
        relieves={"prefill": "raise", "queue_budget": "raise", "decode": "lower"},
        label={"en": "token budget per scheduler step", "zh": "每个调度步的 token 预算"},
        trade={
            "en": "TTFT vs ITL: bigger prefill chunks make each step longer",
            "zh": "TTFT 换 ITL：prefill 块更大，每一步更长",
        },
        note={
            "en": "The v1 scheduler schedules running (decode) requests first and fills the "
            "rest of the budget with prefill chunks: a bigger budget finishes prompts in "
            "fewer steps (TTFT down, throughput up) but makes each step longer (ITL up).",
            "zh": "v1 调度器先排正在运行的 decode 请求，再用剩余预算装 prefill 块：预算越大，prompt 用更少步做完（TTFT 降、吞吐升），但每步更长（ITL 升）。",
        },
        when={
            "ttft": {
                "en": "only when prefill or the step budget holds requests back",
                "zh": "仅当 prefill 或每步预算在拖住请求时",
            }
        },
        reverse={"en": "lower", "zh": "调低"},
    ),
    _k(
        name="enable_chunked_prefill",
        flag="--enable-chunked-prefill",
        config="SchedulerConfig.enable_chunked_prefill",
        source="vllm/config/scheduler.py",
        group="batch_shape",
        value_type="bool",
        move={"en": "keep on (default)", "zh": "保持开启（默认）"},
        throughput="better",
        ttft="depends",
        itl="better",
        relieves={"decode": "enable"},
        label={"en": "split long prompts across steps", "zh": "把长 prompt 拆到多步"},
        trade={
            "en": "a long prompt's own TTFT can grow; turning it off warns in 0.26.0",
            "zh": "长 prompt 自己的 TTFT 可能变长；0.26.0 里关掉会告警",
        },
        note={
            "en": "On by default for generate models; disabling it logs 'This model does not "
            "officially support disabling chunked prefill' (engine/arg_utils.py).",
            "zh": "生成模型默认开启；关掉会打印 'This model does not officially support disabling chunked prefill'（engine/arg_utils.py）。",
        },
    ),
    _k(
        name="enable_prefix_caching",
        flag="--enable-prefix-caching",
        config="CacheConfig.enable_prefix_caching",
        source="vllm/config/cache.py",
        group="reuse_latency",
        value_type="bool",
        move={"en": "keep on (default)", "zh": "保持开启（默认）"},
        throughput="better",
        ttft="better",
        itl="neutral",
        relieves={"prefill": "enable"},
        label={"en": "reuse KV of shared prompt prefixes", "zh": "复用共享前缀的 KV"},
        trade={
            "en": "almost nothing; gains only when prompts share a prefix",
            "zh": "几乎没有代价；只有 prompt 共享前缀时才有收益",
        },
        free_win=True,
        when={
            "throughput": {
                "en": "only when prompts share a prefix",
                "zh": "仅当 prompt 有共享前缀时",
            },
            "ttft": {"en": "only when prompts share a prefix", "zh": "仅当 prompt 有共享前缀时"},
        },
    ),
    _k(
        name="speculative_config",
        flag="--speculative-config",
        config="SpeculativeConfig (vllm/config/speculative.py)",
        source="vllm/config/speculative.py",
        group="reuse_latency",
        value_type="json",
        move={"en": "enable (e.g. ngram or a draft model)", "zh": "开启（如 ngram 或草稿模型）"},
        throughput="depends",
        ttft="neutral",
        itl="better",
        relieves={"decode": "enable"},
        when={
            "itl": {
                "en": "at low batch; at high batch it can get worse",
                "zh": "低批量时；高批量时可能变差",
            }
        },
        label={"en": "speculative decoding", "zh": "投机解码"},
        trade={
            "en": "helps TPOT at low batch; at high batch the verify work can cost throughput",
            "zh": "低批量时改善 TPOT；高批量时验证开销会吃掉吞吐",
        },
    ),
    _k(
        name="enforce_eager",
        flag="--enforce-eager",
        config="ModelConfig.enforce_eager",
        source="vllm/config/model.py",
        group="reuse_latency",
        value_type="bool",
        move={"en": "set True (turn CUDA graphs off)", "zh": "设为 True（关闭 CUDA graphs）"},
        throughput="worse",
        ttft="neutral",
        itl="worse",
        relieves={},
        label={"en": "eager mode, no CUDA graphs", "zh": "eager 模式，不用 CUDA graphs"},
        trade={
            "en": "saves CUDA-graph memory and start-up time, costs decode speed",
            "zh": "省下 CUDA graph 显存与启动时间，代价是 decode 变慢",
        },
        reverse={"en": "keep False (CUDA graphs on)", "zh": "保持 False（开启 CUDA graphs）"},
    ),
    _k(
        name="tensor_parallel_size",
        flag="--tensor-parallel-size",
        config="ParallelConfig.tensor_parallel_size",
        source="vllm/config/parallel.py",
        group="scale",
        value_type="int",
        move={"en": "raise (more GPUs)", "zh": "调高（更多 GPU）"},
        throughput="better",
        ttft="better",
        itl="better",
        relieves={"kv": "raise", "decode": "raise"},
        label={"en": "tensor parallel GPUs", "zh": "张量并行 GPU 数"},
        trade={
            "en": "more GPUs and all-reduce traffic on every layer; 1 on a single 4090",
            "zh": "更多 GPU，每层都有 all-reduce 通信；单张 4090 上只能是 1",
        },
        when={
            "throughput": {
                "en": "of this deployment; per GPU often below independent replicas",
                "zh": "指这一个部署；按每张 GPU 算常低于独立副本",
            }
        },
    ),
]

KNOBS: dict[str, Knob] = {k.name: k for k in _KNOBS}
GROUPS: dict[str, dict[str, str]] = {
    "capacity": {"en": "capacity", "zh": "容量"},
    "batch_shape": {"en": "batch shape", "zh": "批形状"},
    "reuse_latency": {"en": "reuse & latency", "zh": "复用与延迟"},
    "scale": {"en": "scale", "zh": "扩展"},
}
# Symbols say good or bad for that metric, not up or down: "✗ worse" on ITL means ITL rises.
EFFECT_SYMBOL: dict[str, str] = {"better": "✓", "worse": "✗", "neutral": "≈", "depends": "±"}
NONE_DEFAULT: dict[str, dict[str, str]] = {
    "quantization": {"en": "none (read from the model's config)", "zh": "无（按模型 config）"},
    "max_model_len": {"en": "from the model's config", "zh": "取自模型 config"},
    "speculative_config": {"en": "off", "zh": "关闭"},
}
EFFECT_WORD: dict[str, dict[str, str]] = {
    "better": {"en": "better", "zh": "变好"},
    "worse": {"en": "worse", "zh": "变差"},
    "neutral": {"en": "about the same", "zh": "基本不变"},
    "depends": {"en": "depends", "zh": "看情况"},
}


def get(name: str) -> Knob:
    """The knob called ``name`` (LLM kwarg, or flag with or without dashes)."""
    key = name.strip().lstrip("-").replace("-", "_")
    if key not in KNOBS:
        raise KnobError(f"unknown knob {name!r}; known: {', '.join(KNOBS)}")
    return KNOBS[key]


def _is_large_gpu(gpu_memory_gib: float, gpu_name: str) -> bool:
    return gpu_memory_gib >= LARGE_GPU_GIB and "a100" not in gpu_name.lower()


def default(
    name: str, *, gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> Any:
    """The value a user gets in 0.26.0 when the knob is not set (CUDA GPUs)."""
    knob = get(name)
    if entry not in ("serve", "llm"):
        raise KnobError(f"entry must be 'serve' or 'llm', not {entry!r}")
    large = _is_large_gpu(gpu_memory_gib, gpu_name)
    if knob.name == "max_num_seqs":
        return 1024 if large else 256
    if knob.name == "max_num_batched_tokens":
        if large:
            return 8192 if entry == "serve" else 16384
        return 2048 if entry == "serve" else 8192
    return {
        "gpu_memory_utilization": 0.92,
        "quantization": None,  # read from the model's quantization_config if present
        "kv_cache_dtype": "auto",
        "max_model_len": None,  # derived from the model config
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "speculative_config": None,
        "enforce_eager": False,
        "tensor_parallel_size": 1,
    }[knob.name]


def _max_model_len(value: Any) -> int | None:
    """``--max-model-len`` as 0.26.0 parses it: ints, '1k'/'1K', and -1 or 'auto'."""
    if value is None:
        return None
    text = str(value).strip()
    if isinstance(value, bool):
        raise KnobError(f"max_model_len: {value!r} is not a valid int")
    if text == "-1" or text.lower() == "auto":
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text)
    if not m:
        raise KnobError(f"max_model_len: {value!r} is not an int, '1k'/'1K' or -1/'auto'")
    mult = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    n = float(m.group(1)) * mult[m.group(2)]
    if not m.group(2) and not n.is_integer():
        raise KnobError(f"max_model_len: {value!r} is not a valid int")
    if int(n) < 1:
        raise KnobError(f"max_model_len must be >= 1, or -1/'auto', got {value!r}")
    return int(n)


def _coerce(knob: Knob, value: Any) -> Any:
    t = knob.value_type
    if knob.name == "max_model_len":
        return _max_model_len(value)
    try:
        if t == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if t == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if t == "bool":
            if isinstance(value, bool):
                return value
            s = str(value).lower()
            if s in ("true", "1", "yes", "on"):
                return True
            if s in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if t == "json":
            if value is None or isinstance(value, dict):
                return value
            return json.loads(str(value))
        return None if value is None else str(value)
    except (ValueError, TypeError, json.JSONDecodeError):
        raise KnobError(f"{knob.name}: {value!r} is not a valid {t}") from None


def validate(
    values: Mapping[str, Any],
    *,
    gpu_memory_gib: float | None = None,
    entry: Entry = "serve",
    gpu_name: str = "",
) -> dict[str, Any]:
    """Check names, types, ranges and the cross-knob rules vLLM 0.26.0 enforces.

    Returns the values coerced to their types; raises KnobError with one line.
    Cross-knob rules use the defaults a user gets when ``gpu_memory_gib`` is given.
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        knob = get(name)
        v = _coerce(knob, value)
        n = knob.name
        if n == "gpu_memory_utilization" and not 0 < v <= 1:
            raise KnobError(f"gpu_memory_utilization must be in (0, 1], got {v}")
        if n in ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size") and v < 1:
            raise KnobError(f"{n} must be >= 1, got {v}")
        if knob.choices and v is not None and v not in knob.choices:
            raise KnobError(f"{n}: {v!r} is not one of {', '.join(knob.choices)}")
        out[n] = v
    seqs = out.get("max_num_seqs")
    tokens = out.get("max_num_batched_tokens")
    if gpu_memory_gib is not None:
        # EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: an unset
        # max_num_seqs is clamped to the token budget; an unset token budget is not raised
        # to meet an explicit max_num_seqs (SchedulerConfig then rejects the pair).
        if tokens is None:
            tokens = default(
                "max_num_batched_tokens",
                gpu_memory_gib=gpu_memory_gib,
                entry=entry,
                gpu_name=gpu_name,
            )
        if seqs is None:
            seqs = min(
                default(
                    "max_num_seqs", gpu_memory_gib=gpu_memory_gib, entry=entry, gpu_name=gpu_name
                ),
                tokens,
            )
    if seqs is not None and tokens is not None and tokens < seqs:
        # SchedulerConfig.verify_max_model_len in vllm/config/scheduler.py
        raise KnobError(
            f"max_num_batched_tokens ({tokens}) must be >= max_num_seqs ({seqs}); "
            "raise max_num_batched_tokens with max_num_seqs"
        )
    mml = out.get("max_model_len")
    if (
        out.get("enable_chunked_prefill") is False
        and tokens is not None
        and mml is not None
        and mml > 0
        and tokens < mml
    ):
        raise KnobError(
            f"with chunked prefill off, max_num_batched_tokens ({tokens}) must be "
            f">= max_model_len ({mml})"
        )
    return out


def to_cli_args(values: Mapping[str, Any], *, check: bool = True) -> list[str]:
    """``vllm serve`` arguments for validated knob values (an argv list, never a string).

    ``check=False`` checks each knob on its own (name, type, range) but not the cross-knob
    rules, so vLLM itself judges the combination (to record its own error on purpose).
    """
    if check:
        checked = validate(values)
    else:
        checked = {}
        for name, value in values.items():
            checked.update(validate({name: value}))
    args: list[str] = []
    for name, value in checked.items():
        knob = KNOBS[name]
        if value is None:
            continue
        if knob.value_type == "bool":
            # 0.26.0 flags are BooleanOptionalAction: --x / --no-x
            args.append(knob.flag if value else "--no-" + knob.flag[2:])
        elif knob.value_type == "json":
            args += [knob.flag, json.dumps(value, separators=(",", ":"))]
        else:
            args += [knob.flag, str(value)]
    return args


def recommend(goal: str) -> list[Knob]:
    """Knobs whose move (the table's "move" column) pushes ``goal`` the right way.

    Exactly the rows whose cell for ``goal`` shows ✓ in ``table``; a conditional ✓ is
    included, and ``Knob.condition(goal)`` says what it needs. Trades still apply.
    """
    if goal == "capacity":
        return [k for k in _KNOBS if "kv" in k.relieves]
    if goal not in METRIC_ATTR:
        raise KnobError(f"goal must be throughput, ttft, itl, tpot or capacity, not {goal!r}")
    return [k for k in _KNOBS if k.effect(goal) == "better"]


def moves(goal: str, lang: Lang = "en") -> list[tuple[Knob, str, str]]:
    """(knob, move, condition) for every move that helps ``goal``, the reverse moves included
    (lowering ``max_num_batched_tokens`` helps ITL because raising it hurts ITL)."""
    if goal not in METRIC_ATTR:
        raise KnobError(f"goal must be throughput, ttft, itl or tpot, not {goal!r}")
    out = [(k, k.move[lang], k.condition(goal, lang)) for k in recommend(goal)]
    out += [
        (k, k.reverse[lang], "")
        for k in _KNOBS
        if k.reverse and INVERSE[k.effect(goal)] == "better"
    ]
    return out


def spectrum(lang: Lang = "en") -> list[dict[str, str]]:
    """The knob spectrum as three columns: toward throughput, toward low ITL, nearly free.

    Read from the same records as ``table``: a move sits in a column when its effect on that
    end is ✓ (conditions in brackets); free wins sit in the third column only.
    """
    zh = lang == "zh"
    cols = (
        ("推向吞吐端", "推向低延迟端（ITL/TPOT）", "两端都几乎免费")
        if zh
        else ("toward throughput", "toward low latency (ITL/TPOT)", "close to free on both ends")
    )

    def cell(k: Knob, move: str, cond: str) -> str:
        return f"`{k.flag}` {move}" + _paren(cond, lang)

    free = [cell(k, k.move[lang], k.trade[lang]) for k in free_wins()]
    thr = [cell(k, m, c) for k, m, c in moves("throughput", lang) if not k.free_win]
    lat = [cell(k, m, c) for k, m, c in moves("itl", lang) if not k.free_win]
    n = max(len(free), len(thr), len(lat))
    pad = [c + [""] * (n - len(c)) for c in (thr, lat, free)]
    return [dict(zip(cols, row, strict=True)) for row in zip(*pad, strict=True)]


def spectrum_markdown(lang: Lang = "en") -> str:
    return _markdown(spectrum(lang))


def effect_cell(k: Knob, metric: str, lang: Lang = "en") -> str:
    """One cell of the direction map: symbol, word and the condition when there is one."""
    e = k.effect(metric)
    cond = k.condition(metric, lang)
    return f"{EFFECT_SYMBOL[e]} {EFFECT_WORD[e][lang]}" + _paren(cond, lang)


def _paren(text: str, lang: Lang) -> str:
    if not text:
        return ""
    return f"（{text}）" if lang == "zh" else f" ({text})"


def free_wins() -> list[Knob]:
    """Knobs that help both ends of the curve and trade something other than the curve."""
    return [k for k in _KNOBS if k.free_win]


# The order in which to try the knobs for a binding constraint: cheapest, most direct first
# (no restart-heavy or quality-moving knob before a pure scheduler knob).
PRIORITY: dict[str, tuple[str, ...]] = {
    "queue": ("max_num_seqs",),
    "queue_budget": ("max_num_batched_tokens",),
    "prefill": ("max_num_batched_tokens", "enable_prefix_caching"),
    "decode": (
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "quantization",
        "speculative_config",
        "tensor_parallel_size",
    ),
    "kv": ("gpu_memory_utilization", "kv_cache_dtype", "quantization", "tensor_parallel_size"),
}


# The words of ``relieves`` moves, per language (the tree's Mermaid and ``why`` use them).
RELIEF_WORD: dict[str, dict[str, str]] = {
    "raise": {"en": "raise", "zh": "调高"},
    "lower": {"en": "lower", "zh": "调低"},
    "enable": {"en": "enable", "zh": "开启"},
    "fp8": {"en": "fp8", "zh": "改成 fp8"},
}


def for_constraint(constraint: str) -> list[tuple[Knob, str]]:
    """(knob, which way) pairs that relieve a binding constraint, in the order to try them."""
    order = PRIORITY.get(constraint, ())
    assert all(constraint in KNOBS[n].relieves for n in order), constraint
    assert {k.name for k in _KNOBS if constraint in k.relieves} == set(order), constraint
    return [(KNOBS[n], KNOBS[n].relieves[constraint]) for n in order]


def table(
    lang: Lang = "en", gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> list[dict[str, str]]:
    """One row per knob for the book, in ``lang``."""
    zh = lang == "zh"
    cols = (
        ("旋钮", "默认", "组", "动作", "吞吐", "TTFT", "ITL/TPOT", "代价")
        if zh
        else ("knob", "default", "group", "move", "throughput", "TTFT", "ITL/TPOT", "trade")
    )
    rows = []
    for k in _KNOBS:
        d = default(k.name, gpu_memory_gib=gpu_memory_gib, entry=entry, gpu_name=gpu_name)
        dtext = NONE_DEFAULT[k.name][lang] if d is None else str(d)
        cells = (
            f"`{k.flag}`",
            dtext,
            GROUPS[k.group][lang],
            k.move[lang],
            *(effect_cell(k, m, lang) for m in ("throughput", "ttft", "itl")),
            k.trade[lang],
        )
        rows.append(dict(zip(cols, cells, strict=True)))
    return rows


def table_markdown(
    lang: Lang = "en", gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> str:
    return _markdown(table(lang, gpu_memory_gib, entry, gpu_name))


def _markdown(rows: list[dict[str, str]]) -> str:
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r[c].replace("|", "\\|") for c in head) + " |" for r in rows]
    return "\n".join(lines)

"""The knob records of the direction map (data): one ``Knob`` per vLLM 0.26.0 tuning knob and
the direction each move pushes throughput, TTFT and ITL/TPOT. ``core.knobs`` reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Effect = Literal["better", "worse", "neutral", "depends"]
Group = Literal["capacity", "batch_shape", "reuse_latency", "scale"]
Entry = Literal["serve", "llm"]
Lang = Literal["zh", "en"]

METRIC_ATTR: dict[str, str] = {
    "throughput": "throughput",
    "ttft": "ttft",
    "itl": "itl",
    "tpot": "itl",
}


@dataclass(frozen=True)
class Knob:
    name: str  # the LLM(...) kwarg, also our key
    config: str  # config dataclass.field as named in 0.26.0
    group: Group
    value_type: str  # float | int | bool | str | json
    move: dict[str, str]  # the move the effects describe, zh/en
    throughput: Effect
    ttft: Effect
    itl: Effect  # ITL and TPOT move together unless `note` says otherwise
    relieves: dict[str, str]  # constraint -> which way to turn it for that constraint
    label: dict[str, str]
    trade: dict[str, str]
    note: dict[str, str] = field(default_factory=dict)  # the knob-direction quiz explains with it
    choices: tuple[str, ...] = ()
    free_win: bool = False
    # metric ("throughput" | "ttft" | "itl") -> the condition its effect needs, zh/en
    when: dict[str, dict[str, str]] = field(default_factory=dict)
    # the opposite move, when it is a real choice (its effects are the inverse ones)
    reverse: dict[str, str] = field(default_factory=dict)

    @property
    def kwarg(self) -> str:
        return self.name

    @property
    def flag(self) -> str:
        """The `vllm serve` flag."""
        return "--" + self.name.replace("_", "-")

    @property
    def source(self) -> str:
        """The file in the 0.26.0 wheel that declares it (vllm/config/<class>.py)."""
        cls = self.config.split(".")[0].split(" ")[0]
        return f"vllm/config/{cls.removesuffix('Config').lower()}.py"

    def text(self, what: str, lang: Lang = "en") -> str:
        return getattr(self, what)[lang]

    def effect(self, metric: str) -> Effect:
        return getattr(self, METRIC_ATTR[metric])

    def condition(self, metric: str, lang: Lang = "en") -> str:
        """The condition the effect on ``metric`` needs ('' when it always holds)."""
        return self.when.get(METRIC_ATTR[metric], {}).get(lang, "")


# `CacheDType` in vllm/config/cache.py (0.26.0)
CACHE_DTYPES: tuple[str, ...] = tuple(
    "auto float16 bfloat16 fp8 fp8_e4m3 fp8_e5m2 fp8_inc fp8_ds_mla turboquant_k8v4 "
    "turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc int4_per_token_head "
    "int8_per_token_head fp8_per_token_head nvfp4".split()
)


# `QuantizationMethods` in vllm/model_executor/layers/quantization/__init__.py (0.26.0)
QUANTIZATION_METHODS: tuple[str, ...] = tuple(
    "awq auto_awq fp8 fbgemm_fp8 fp_quant modelopt modelopt_fp4 modelopt_mxfp8 "
    "modelopt_mixed auto_gptq gptq gptq_marlin awq_marlin humming compressed-tensors "
    "bitsandbytes experts_int8 quark moe_wna16 torchao inc mxfp4 gpt_oss_mxfp4 "
    "deepseek_v4_fp8 online fp8_per_tensor fp8_per_block fp8_per_channel "
    "int8_per_channel_weight_only nvfp4_per_token mxfp8".split()
)


# The words of ``relieves`` moves (the records' moves, the tree's Mermaid and ``why``).
RELIEF_WORD: dict[str, dict[str, str]] = {
    "raise": {"en": "raise", "zh": "调高"},
    "lower": {"en": "lower", "zh": "调低"},
    "enable": {"en": "enable", "zh": "开启"},
    "fp8": {"en": "fp8", "zh": "改成 fp8"},
}
KV_WAIT = {"en": "only when requests wait for KV space", "zh": "仅当请求在等 KV 空间时"}
KV_BOUND = {"en": "only while the KV cache limits the batch", "zh": "仅当 KV cache 限制了批大小时"}


KNOB_LIST: list[Knob] = [
    Knob(
        name="gpu_memory_utilization",
        config="CacheConfig.gpu_memory_utilization",
        group="capacity",
        value_type="float",
        move=RELIEF_WORD["raise"],
        throughput="better",
        ttft="better",
        itl="neutral",
        relieves={"kv": "raise"},
        label={"en": "GPU memory fraction for the engine", "zh": "引擎可用显存比例"},
        trade={
            "en": "less headroom for other processes; start-up is refused when that much is "
            "not free",
            "zh": "留给其他进程的显存变少；空闲显存不够这个比例时拒绝启动",
        },
        when={"throughput": KV_BOUND, "ttft": KV_WAIT},
    ),
    Knob(
        name="quantization",
        config="ModelConfig.quantization",
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
    Knob(
        name="kv_cache_dtype",
        config="CacheConfig.cache_dtype",
        group="capacity",
        value_type="str",
        move=RELIEF_WORD["fp8"],
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
    Knob(
        name="max_model_len",
        config="ModelConfig.max_model_len",
        group="capacity",
        value_type="int",
        move=RELIEF_WORD["lower"],
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
    ),
    Knob(
        name="max_num_seqs",
        config="SchedulerConfig.max_num_seqs",
        group="batch_shape",
        value_type="int",
        move=RELIEF_WORD["raise"],
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
        reverse=RELIEF_WORD["lower"],
    ),
    Knob(
        name="max_num_batched_tokens",
        config="SchedulerConfig.max_num_batched_tokens",
        group="batch_shape",
        value_type="int",
        move=RELIEF_WORD["raise"],
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
        reverse=RELIEF_WORD["lower"],
    ),
    Knob(
        name="enable_chunked_prefill",
        config="SchedulerConfig.enable_chunked_prefill",
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
    ),
    Knob(
        name="enable_prefix_caching",
        config="CacheConfig.enable_prefix_caching",
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
    Knob(
        name="speculative_config",
        config="SpeculativeConfig (vllm/config/speculative.py)",
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
    Knob(
        name="enforce_eager",
        config="ModelConfig.enforce_eager",
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
    Knob(
        name="tensor_parallel_size",
        config="ParallelConfig.tensor_parallel_size",
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

"""Memory arithmetic from a Hugging Face ``config.json``: weights, KV per token, KV tokens,
max concurrency, the decode roofline (TPOT floor), and vLLM 0.26.0's KV cache predicted term
by term before you rent a GPU (``predict``; ``rehearse`` runs another GPU's budget here).
KV blocks and tokens follow ``vllm/v1/core/kv_cache_utils.py``; the terms that must be
measured live in ``core.capacity_terms``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity_terms import CONTEXT_GIB, CUDAGRAPH_GIB_BY_MAX_NUM_SEQS, TERMS
from course_utils.core.knobs import GIB as GIB

BLOCK_SIZE = 16  # the CUDA default for these models
DTYPE_BYTES: dict[str, int | None] = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": None}
DTYPE_BYTES |= dict.fromkeys(("fp8", "fp8_e4m3", "fp8_e5m2"), 1)
MODELS = ("qwen2.5-7b-instruct", "qwen2.5-7b-instruct-awq")


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # nvidia-smi's total (MiB / 1024)
    hbm_gbps: float  # vendor peak memory bandwidth, GB/s
    # CUDA's total (cudaMemGetInfo), which vLLM multiplies by gpu_memory_utilization; a little
    # less than nvidia-smi's, used where this is None
    cuda_total_gib: float | None = None

    @property
    def total_gib(self) -> float:
        """The total vLLM sees: CUDA's where known, else nvidia-smi's."""
        return self.memory_gib if self.cuda_total_gib is None else self.cuda_total_gib


# NVIDIA's spec sheets; CUDA totals from PyTorch's out-of-memory message on RTX 4090 hosts and
# solved from the --kv-cache-memory bytes vLLM logged on the H200 lab host
GPUS: dict[str, GPU] = {
    "rtx4090": GPU("RTX 4090", 24564 / 1024, 1008, 23.64),
    "a100-80gb": GPU("A100 80GB SXM", 81920 / 1024, 2039),
    "h100": GPU("H100 SXM", 81559 / 1024, 3350),
    "h200": GPU("H200", 143771 / 1024, 4800, 150_109_880_320 / 1024**3),
}


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    dtype: str
    quant: dict[str, Any] | None
    max_position: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any], name: str = "model") -> ModelShape:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(
            name=name,
            hidden=hidden,
            intermediate=int(cfg["intermediate_size"]),
            layers=int(cfg["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab=int(cfg["vocab_size"]),
            tied=bool(cfg.get("tie_word_embeddings")),
            dtype=str(cfg.get("torch_dtype", "bfloat16")),
            quant=cfg.get("quantization_config"),
            max_position=int(cfg.get("max_position_embeddings", 0)),
        )

    def linear_params(self) -> int:
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        per_layer = (
            self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate
        )
        return per_layer * self.layers

    def other_params(self) -> int:
        """Embeddings, LM head, norms and qkv biases (kept in 16 bit by AWQ/GPTQ)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        per_layer = 2 * self.hidden + q + 2 * kv
        return emb + per_layer * self.layers + self.hidden

    def params(self) -> int:
        return self.linear_params() + self.other_params()

    def weight_bytes(self) -> float:
        if self.quant and int(self.quant.get("bits", 16)) < 16:
            bits = int(self.quant["bits"])
            group = int(self.quant.get("group_size", 128))
            # packed weights + a 16-bit scale and a `bits`-bit zero point per group
            per_weight = bits / 8 + (2 + bits / 8) / group
            return self.linear_params() * per_weight + self.other_params() * 2
        return self.params() * (DTYPE_BYTES.get(self.dtype) or 2)

    def weight_gib(self) -> float:
        return self.weight_bytes() / GIB

    def loaded_weight_gib(self) -> float:
        """What vLLM logs as "Model loading took X GiB": the parameters plus the buffers a
        loaded model holds (v1/worker/gpu/model_runner.py load_model measures both)."""
        return self.weight_gib() + TERMS["load_extra_gib"].value

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """K and V of one token across all layers."""
        b = DTYPE_BYTES.get(kv_dtype)
        if kv_dtype != "auto" and b is None:
            raise ValueError(f"unknown kv_cache_dtype {kv_dtype!r}")
        if b is None:
            b = 2 if self.dtype in ("float16", "bfloat16") else (DTYPE_BYTES.get(self.dtype) or 2)
        return 2 * self.layers * self.kv_heads * self.head_dim * b

    def page_size_bytes(self, kv_dtype: str = "auto") -> int:
        """One block of one layer (vLLM's ``page_size_bytes``)."""
        return self.kv_bytes_per_token(kv_dtype) // self.layers * BLOCK_SIZE

    def kv_blocks(self, kv_memory_gib: float, kv_dtype: str = "auto") -> int:
        avail = int(kv_memory_gib * GIB)
        return max(avail // self.page_size_bytes(kv_dtype) // self.layers, 0)

    def kv_tokens(self, kv_memory_gib: float, kv_dtype: str = "auto") -> int:
        return self.kv_blocks(kv_memory_gib, kv_dtype) * BLOCK_SIZE

    def max_concurrency(
        self, kv_memory_gib: float, max_model_len: int, kv_dtype: str = "auto"
    ) -> float:
        return self.kv_blocks(kv_memory_gib, kv_dtype) / math.ceil(max_model_len / BLOCK_SIZE)


def config_dir(name: str = "qwen2.5-7b-instruct") -> Path:
    """Folder of a shipped model config (config.json, generation_config.json)."""
    return Path(str(resources.files("course_utils") / "data" / "models" / name))


def load_model(name_or_path: str = "qwen2.5-7b-instruct") -> ModelShape:
    """A shipped config (``qwen2.5-7b-instruct``, ``...-awq``) or a path to config.json/dir."""
    key = name_or_path.lower().split("/")[-1]
    if key in MODELS:
        text = (config_dir(key) / "config.json").read_text()
        return ModelShape.from_config(json.loads(text), key)
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ValueError(
            f"unknown model {name_or_path!r}: use one of {', '.join(MODELS)} "
            "or a path to a config.json"
        )
    return ModelShape.from_config(json.loads(p.read_text()), p.parent.name)


def gpu_key(name: str) -> str:
    """The table's name for a GPU; "4090" and "RTX 4090" mean rtx4090. ValueError if unknown."""
    key = str(name).strip().lower().replace(" ", "").replace("_", "-")
    key = "rtx4090" if key in ("4090", "rtx-4090") else key
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}: one of {', '.join(sorted(GPUS))}")
    return key


def get_gpu(name: str) -> GPU:
    return GPUS[gpu_key(name)]


@dataclass
class Fit:
    """What vLLM 0.26.0 will leave for the KV cache, term by term (GiB; see ``predict``)."""

    model: str
    gpu: str
    gpu_memory_utilization: float
    budget_gib: float  # requested: CUDA total x utilisation
    weights_gib: float
    overhead_gib: float  # activation peak + non-torch (what the fixed 1.9 GiB used to guess)
    kv_memory_gib: float
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    activation_gib: float = 0.0
    non_torch_gib: float = 0.0
    cudagraph_gib: float = 0.0  # taken after the KV cache, outside the budget
    headroom_gib: float = 0.0  # CUDA total - budget - context - graphs - sampler buffers
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    entry: str = "serve"
    total_gib: float = 0.0

    @property
    def fits(self) -> bool:
        """vLLM starts: KV for one max_model_len request and room outside the budget for what
        it allocates after the profile (CUDA graphs, the sampler's penalty counts)."""
        return self.kv_memory_gib > 0 and self.max_concurrency >= 1 and self.headroom_gib >= 0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "fits": self.fits}

    def line(self, lang: str = "en") -> str:
        """The arithmetic term by term, in one line."""
        gib = (self.budget_gib, self.weights_gib, self.activation_gib, self.non_torch_gib)
        kv = (self.kv_tokens, self.max_concurrency, self.max_model_len)
        return budget_line((*gib, self.kv_memory_gib), *kv, lang)


def budget_line(
    gib: Sequence[float], tokens: int, concurrency: float, max_model_len: int, lang: str = "en"
) -> str:
    """``budget - weights - activation - non-torch = KV`` (``gib``, in that order) and what the
    KV holds, in words."""
    terms = " - ".join(f"{x:.2f}" for x in gib[:4]) + f" = {gib[4]:.2f} GiB"
    if lang == "zh":
        return (
            f"预算 - 权重 - 激活峰值 - 非 torch = KV：{terms}，即 {tokens:,} 个 token，"
            f"可同时容纳 {concurrency:.1f} 个 {max_model_len:,} token 的请求"
        )
    return (
        f"budget - weights - activation peak - non-torch = KV: {terms}, i.e. {tokens:,} tokens, "
        f"{concurrency:.1f} requests of {max_model_len:,} tokens at once"
    )


_LOGGED_GIB = (
    "requested_gib",
    "weights_memory_gib",
    "torch_peak_increase_gib",
    "non_torch_increase_gib",
    "available_kv_gib",
)


def logged_line(memory: dict[str, Any], facts: dict[str, Any], lang: str = "en") -> str:
    """``budget_line`` from what vLLM logged (a ProbeRecord's ``memory`` and ``facts``)."""
    kv = (facts["kv_cache_tokens"], facts["max_concurrency"], facts["concurrency_len"])
    return budget_line([memory[k] for k in _LOGGED_GIB], *kv, lang)


def custom_gpu(total_gib: float, name: str | None = None) -> GPU:
    """A GPU known only by the total CUDA reports (``torch.cuda.mem_get_info()[1]`` in GiB,
    or "total" in vLLM's "Free memory on device (free/total GiB)" line)."""
    if total_gib <= 0:
        raise ValueError(f"GPU total must be > 0 GiB, not {total_gib}")
    label = name or f"{total_gib:g} GiB GPU"
    return GPU(label, total_gib, 0.0, total_gib)


def activation_gib(
    shape: ModelShape,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    *,
    compile_cached: bool = False,
) -> float:
    """The torch peak of vLLM's profile run (model_runner.py profile_run): the forward pass
    over the token budget, or on a cold start the larger of that and the profile floor."""
    del max_num_seqs  # measured not to matter (capacity_terms "profile_floor_gib")
    act = DTYPE_BYTES.get(shape.dtype) or 2
    per_token = (3 * shape.intermediate + 3 * shape.hidden) * act * TERMS["forward_factor"].value
    forward = max_num_batched_tokens * per_token / GIB
    # the floor holds two hidden-state copies of the token budget (the forward's output and
    # the rows gathered for the sampler)
    if compile_cached:
        return forward
    floor = TERMS["profile_floor_gib"].value + 2 * max_num_batched_tokens * shape.hidden * act / GIB
    return max(forward, floor)


def cudagraph_gib(max_num_seqs: int) -> float:
    """CUDA graph memory vLLM captures after the KV cache, interpolated by max_num_seqs."""
    seqs, gib = zip(*sorted(CUDAGRAPH_GIB_BY_MAX_NUM_SEQS.items()), strict=True)
    return float(np.interp(max_num_seqs, seqs, gib))


def predict(
    model: str | ModelShape,
    gpu: str | GPU,
    gpu_memory_utilization: float = 0.92,
    max_model_len: int = 4096,
    kv_dtype: str = "auto",
    *,
    entry: str = "serve",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    overhead_gib: float | None = None,
    compile_cached: bool = False,
) -> Fit:
    """vLLM 0.26.0's KV cache for a model on a GPU: ``ceil(CUDA total x utilisation)`` minus
    the loaded weights, the activation peak and the non-torch growth (gpu_worker.py
    determine_available_memory), counted in blocks as kv_cache_utils.py does. Unset batch knobs
    take the GPU's defaults; ``overhead_gib`` replaces activation + non-torch;
    ``compile_cached``: a restart that loads torch.compile's graphs from vLLM's cache."""
    # vLLM's own rules on the knobs; a length is needed here, not auto
    given = {
        "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
    }
    set_ = {k: x for k, x in given.items() if x is not None}
    knobs_mod.validate(set_, entry="serve" if entry == "serve" else "llm")
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be a length >= 1 here, got {max_model_len}")
    if overhead_gib is not None and overhead_gib < 0:
        raise ValueError(f"overhead_gib must be >= 0, got {overhead_gib}")
    shape = model if isinstance(model, ModelShape) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    kw: dict[str, Any] = {"gpu_memory_gib": g.total_gib, "entry": entry, "gpu_name": g.name}
    seqs = int(max_num_seqs or knobs_mod.default("max_num_seqs", **kw))
    mbt = int(max_num_batched_tokens or knobs_mod.default("max_num_batched_tokens", **kw))
    requested = math.ceil(g.total_gib * GIB * gpu_memory_utilization) / GIB
    act = activation_gib(shape, mbt, seqs, compile_cached=compile_cached)
    non_torch = TERMS["non_torch_gib"].value
    overhead = act + non_torch if overhead_gib is None else overhead_gib
    weights = shape.loaded_weight_gib()
    if kv_dtype.startswith("fp8"):
        weights += TERMS["fp8_kv_load_gib"].value
    kv_mem = requested - weights - overhead
    blocks = shape.kv_blocks(max(kv_mem, 0.0), kv_dtype)
    per_req = math.ceil(max_model_len / BLOCK_SIZE)
    graphs = cudagraph_gib(seqs)
    # sample/penalties.py output_bin_counts (max_num_seqs x vocab int32), outside the profile
    penalties = seqs * shape.vocab * 4 / GIB
    return Fit(
        model=shape.name,
        gpu=g.name,
        gpu_memory_utilization=gpu_memory_utilization,
        budget_gib=requested,
        weights_gib=weights,
        overhead_gib=overhead,
        kv_memory_gib=kv_mem,
        kv_tokens=int(blocks / per_req * max_model_len),
        max_model_len=max_model_len,
        max_concurrency=blocks / per_req,
        activation_gib=act if overhead_gib is None else 0.0,
        non_torch_gib=non_torch if overhead_gib is None else 0.0,
        cudagraph_gib=graphs,
        headroom_gib=g.total_gib - requested - CONTEXT_GIB - graphs - penalties,
        max_num_seqs=seqs,
        max_num_batched_tokens=mbt,
        entry=entry,
        total_gib=g.total_gib,
    )


def tpot_floor_ms(
    model: str | ModelShape,
    gpu: str | GPU,
    batch: int = 1,
    context_tokens: int = 0,
    kv_dtype: str = "auto",
    bandwidth_gbps: float | None = None,
) -> float:
    """Decode roofline: one step reads every weight once plus each sequence's KV, at the
    datasheet's bandwidth or a measured ``bandwidth_gbps``."""
    shape = model if isinstance(model, ModelShape) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    bw = (bandwidth_gbps or g.hbm_gbps) * 1e9
    step_bytes = shape.weight_bytes() + batch * context_tokens * shape.kv_bytes_per_token(kv_dtype)
    return step_bytes / bw * 1000


@dataclass(frozen=True)
class Rehearsal:
    """Run as if on ``target``: its requested memory and batch defaults passed explicitly
    (memory, KV capacity, max concurrency and the start-up fit carry over; speed does not)."""

    target: str
    target_total_gib: float
    here_total_gib: float
    entry: str
    util: float  # asked for on the target
    util_here: float  # the same bytes on this GPU
    max_num_seqs: int
    max_num_batched_tokens: int

    def knobs(self) -> dict[str, Any]:
        return {
            "gpu_memory_utilization": self.util_here,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }

    @property
    def requested_gib(self) -> float:
        return self.target_total_gib * self.util

    def scale(self, util: float) -> float:
        """A utilisation on the target as the same bytes on this GPU."""
        here = round(float(util) * self.target_total_gib / self.here_total_gib, 6)
        if not 0 < here <= 1:
            raise ValueError(f"gpu_memory_utilization {util} on {self.target} does not fit here")
        return here

    def on_target(self, serve_command: str) -> str:
        """A command run here as the target runs it: every --gpu-memory-utilization scaled
        back to the target's share of its own memory (the batch knobs are the target's)."""

        def back(m: re.Match[str]) -> str:
            util = float(m.group(2)) * self.here_total_gib / self.target_total_gib
            return f"{m.group(1)}{round(util, 4):g}"

        return re.sub(r"(--gpu-memory-utilization[ =])([0-9.]+)", back, serve_command)

    def explain(self, lang: str = "en") -> list[str]:
        """What a rehearsal reproduces and what it does not, in plain words."""
        left = self.here_total_gib - self.requested_gib
        if lang == "zh":
            return [
                f"在这块 {self.here_total_gib:.1f} GiB 的卡上预演 {self.target}：vLLM 申请 "
                f"{self.util} x {self.target_total_gib:.2f} GiB = {self.requested_gib:.2f} GiB"
                f"（这里 --gpu-memory-utilization {self.util_here}），并显式传入 "
                f"{self.target} 在 {self.entry} 入口的默认值（max_num_seqs "
                f"{self.max_num_seqs}，max_num_batched_tokens {self.max_num_batched_tokens}）。",
                "能复现：vLLM 规划的显存（权重、激活峰值、KV cache）、KV 能放多少 token、"
                "最大并发，以及模型能否启动（vLLM 自己的 KV 检查）。",
                f"不能复现：速度（TTFT、TPOT、吞吐和拐点都是这块卡的）；{self.target} 的内核"
                "占用的非 torch 显存和 CUDA graph；以及预算之外 vLLM 还要分配的东西在 "
                f"{self.target} 上放不放得下（这里预算外还剩 {left:.1f} GiB）。",
            ]
        return [
            f"Rehearsing an {self.target} on this {self.here_total_gib:.1f} GiB GPU: vLLM asks "
            f"for {self.util} x {self.target_total_gib:.2f} GiB = {self.requested_gib:.2f} GiB "
            f"(--gpu-memory-utilization {self.util_here} here) and gets the {self.target}'s "
            f"{self.entry} defaults, passed explicitly (max_num_seqs {self.max_num_seqs}, "
            f"max_num_batched_tokens {self.max_num_batched_tokens}).",
            "Reproduced: the memory vLLM plans with (weights, activation peak, KV cache), the "
            "KV capacity in tokens, max concurrency, and whether the model starts (vLLM's own "
            "KV check).",
            f"Not reproduced: speed (TTFT, TPOT, throughput and the knee are this GPU's); the "
            f"non-torch memory and CUDA graphs of the {self.target}'s kernels; and whether what "
            f"vLLM allocates outside its budget fits an {self.target} (here {left:.1f} GiB are "
            "left outside it).",
        ]


def rehearse(
    target: str | GPU, here_total_gib: float, *, entry: str = "serve", util: float | None = None
) -> Rehearsal:
    """The knobs that give this GPU (CUDA total ``here_total_gib``) ``target``'s budget."""
    g = target if isinstance(target, GPU) else get_gpu(target)
    u = float(knobs_mod.default("gpu_memory_utilization") if util is None else util)
    here = round(u * g.total_gib / here_total_gib, 6)
    if not 0 < here <= 1:
        raise ValueError(
            f"{g.name}'s budget ({u} x {g.total_gib:.2f} GiB) does not fit in this GPU's "
            f"{here_total_gib:.2f} GiB"
        )
    kw: dict[str, Any] = {"gpu_memory_gib": g.total_gib, "entry": entry, "gpu_name": g.name}
    return Rehearsal(
        target=g.name,
        target_total_gib=g.total_gib,
        here_total_gib=here_total_gib,
        entry=entry,
        util=u,
        util_here=here,
        max_num_seqs=int(knobs_mod.default("max_num_seqs", **kw)),
        max_num_batched_tokens=int(knobs_mod.default("max_num_batched_tokens", **kw)),
    )

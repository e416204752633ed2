"""Memory arithmetic from a Hugging Face ``config.json``: weights, KV per token, KV tokens,
max concurrency, and the decode roofline (TPOT floor).

KV tokens follow vLLM 0.26.0 exactly (``vllm/v1/core/kv_cache_utils.py``):
``num_blocks = available_memory // page_size // num_layers`` with
``page_size = 2 * block_size * num_kv_heads * head_size * dtype_bytes`` (K and V, one
layer), and ``GPU KV cache size = num_blocks * block_size`` tokens. Block size 16 is the
CUDA default for this model. "Maximum concurrency for N tokens per request" is
``num_blocks / ceil(N / block_size)``.

The weight count is an estimate from the config's shapes (vLLM reported 14.29 GiB for
Qwen2.5-7B-Instruct in bf16 on the H200, this counts 14.18 GiB). The memory left for KV
at a given ``gpu_memory_utilization`` also depends on the activation peak that vLLM
profiles at start-up: ``overhead_gib`` is that assumption, not a vLLM fact.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

GIB = 1024**3
BLOCK_SIZE = 16
DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "auto": None,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
MODELS = ("qwen2.5-7b-instruct", "qwen2.5-7b-instruct-awq")
# Activation peak + non-torch memory + CUDA graphs seen at start-up on the H200
# (labs/results: 0.90 * 140.4 GiB - 14.29 GiB weights - 110.18 GiB KV = 1.89 GiB at
# max_num_batched_tokens 8192). An assumption for other GPUs and budgets.
DEFAULT_OVERHEAD_GIB = 1.9


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # as nvidia-smi reports total memory, in GiB
    hbm_gbps: float  # vendor peak memory bandwidth, GB/s
    source: str
    # What CUDA reports as total (cudaMemGetInfo, torch.accelerator.get_memory_info): the
    # total vLLM multiplies by gpu_memory_utilization (v1/worker/utils.py request_memory).
    # A little less than nvidia-smi's; None where not known (then nvidia-smi's is used).
    cuda_total_gib: float | None = None
    cuda_total_source: str = ""

    @property
    def total_gib(self) -> float:
        """The total vLLM sees: CUDA's where known, else nvidia-smi's."""
        return self.memory_gib if self.cuda_total_gib is None else self.cuda_total_gib


GPUS: dict[str, GPU] = {
    # NVIDIA GeForce RTX 4090 spec: 24 GB GDDR6X, 1,008 GB/s; nvidia-smi shows 24,564 MiB
    # (23.99 GiB). CUDA reports less: PyTorch's out-of-memory message on RTX 4090 hosts says
    # "a total capacity of 23.64 GiB" (23.65 on some drivers).
    "rtx4090": GPU(
        "RTX 4090",
        24564 / 1024,
        1008,
        "NVIDIA RTX 4090 specifications",
        23.64,
        "PyTorch's CUDA out-of-memory message on RTX 4090 hosts (cudaMemGetInfo total)",
    ),
    # NVIDIA A100 datasheet: 80GB SXM, 2,039 GB/s; nvidia-smi shows 81,920 MiB.
    "a100-80gb": GPU("A100 80GB SXM", 81920 / 1024, 2039, "NVIDIA A100 datasheet"),
    # NVIDIA H100 datasheet: H100 SXM 80 GB HBM3, 3.35 TB/s; nvidia-smi shows 81,559 MiB.
    "h100": GPU("H100 SXM", 81559 / 1024, 3350, "NVIDIA H100 datasheet"),
    # NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s; nvidia-smi here showed 143,771 MiB.
    # CUDA total 150,109,880,320 bytes: solved from the exact `--kv-cache-memory` byte counts
    # vLLM logged at utilisation 0.80, 0.92 and 0.94 (labs/results/h200-2026-11-29b knobs);
    # vLLM prints it as "139.8 GiB".
    "h200": GPU(
        "H200",
        143771 / 1024,
        4800,
        "NVIDIA H200 datasheet; nvidia-smi on the lab host",
        150_109_880_320 / 1024**3,
        "solved from vLLM's logged --kv-cache-memory byte counts on the lab host",
    ),
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

    # -- weights ---------------------------------------------------------------
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

    # -- KV cache --------------------------------------------------------------
    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """K and V of one token across all layers."""
        b = DTYPE_BYTES.get(kv_dtype)
        if kv_dtype != "auto" and b is None:
            raise ValueError(f"unknown kv_cache_dtype {kv_dtype!r}")
        if b is None:
            b = 2 if self.dtype in ("float16", "bfloat16") else (DTYPE_BYTES.get(self.dtype) or 2)
        return 2 * self.layers * self.kv_heads * self.head_dim * b

    def page_size_bytes(self, kv_dtype: str = "auto", block_size: int = BLOCK_SIZE) -> int:
        """One block of one layer (vLLM's ``page_size_bytes``)."""
        return self.kv_bytes_per_token(kv_dtype) // self.layers * block_size

    def kv_blocks(
        self, kv_memory_gib: float, kv_dtype: str = "auto", block_size: int = BLOCK_SIZE
    ) -> int:
        avail = int(kv_memory_gib * GIB)
        return max(avail // self.page_size_bytes(kv_dtype, block_size) // self.layers, 0)

    def kv_tokens(
        self, kv_memory_gib: float, kv_dtype: str = "auto", block_size: int = BLOCK_SIZE
    ) -> int:
        return self.kv_blocks(kv_memory_gib, kv_dtype, block_size) * block_size

    def max_concurrency(
        self,
        kv_memory_gib: float,
        max_model_len: int,
        kv_dtype: str = "auto",
        block_size: int = BLOCK_SIZE,
    ) -> float:
        blocks = self.kv_blocks(kv_memory_gib, kv_dtype, block_size)
        return blocks / math.ceil(max_model_len / block_size)


def load_model(name_or_path: str = "qwen2.5-7b-instruct") -> ModelShape:
    """A shipped config (``qwen2.5-7b-instruct``, ``...-awq``) or a path to config.json/dir."""
    key = name_or_path.lower().split("/")[-1]
    if key in MODELS:
        text = (
            resources.files("course_utils") / "data" / "models" / key / "config.json"
        ).read_text()
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


def config_dir(name: str = "qwen2.5-7b-instruct") -> Path:
    """Folder of a shipped model config (config.json, generation_config.json)."""
    return Path(str(resources.files("course_utils") / "data" / "models" / name))


def get_gpu(name: str) -> GPU:
    key = name.lower().replace(" ", "").replace("_", "-")
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}: use one of {', '.join(GPUS)}")
    return GPUS[key]


@dataclass
class Fit:
    model: str
    gpu: str
    gpu_memory_utilization: float
    budget_gib: float
    weights_gib: float
    overhead_gib: float
    kv_memory_gib: float
    kv_tokens: int
    max_model_len: int
    max_concurrency: float

    @property
    def fits(self) -> bool:
        return self.kv_memory_gib > 0 and self.max_concurrency >= 1

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "fits": self.fits}


def fit(
    model: str | ModelShape,
    gpu: str | GPU,
    gpu_memory_utilization: float = 0.92,
    max_model_len: int = 4096,
    kv_dtype: str = "auto",
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
) -> Fit:
    """Estimate what vLLM leaves for KV: total x utilisation - weights - overhead."""
    shape = model if isinstance(model, ModelShape) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    budget = g.memory_gib * gpu_memory_utilization
    kv_mem = max(budget - shape.weight_gib() - overhead_gib, 0.0)
    return Fit(
        model=shape.name,
        gpu=g.name,
        gpu_memory_utilization=gpu_memory_utilization,
        budget_gib=budget,
        weights_gib=shape.weight_gib(),
        overhead_gib=overhead_gib,
        kv_memory_gib=kv_mem,
        kv_tokens=shape.kv_tokens(kv_mem, kv_dtype),
        max_model_len=max_model_len,
        max_concurrency=shape.max_concurrency(kv_mem, max_model_len, kv_dtype)
        if kv_mem > 0
        else 0.0,
    )


def tpot_floor_ms(
    model: str | ModelShape,
    gpu: str | GPU,
    batch: int = 1,
    context_tokens: int = 0,
    kv_dtype: str = "auto",
    bandwidth_gbps: float | None = None,
) -> float:
    """Decode roofline: one step reads every weight once plus each sequence's KV.

    TPOT floor = (weight bytes + batch * context_tokens * KV bytes/token) / bandwidth.
    Pass a measured ``bandwidth_gbps`` to replace the datasheet peak.
    """
    shape = model if isinstance(model, ModelShape) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    bw = (bandwidth_gbps or g.hbm_gbps) * 1e9
    step_bytes = shape.weight_bytes() + batch * context_tokens * shape.kv_bytes_per_token(kv_dtype)
    return step_bytes / bw * 1000


# --------------------------------------------------------------------------------------
# rehearsal: another GPU's memory budget and defaults on the GPU at hand
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rehearsal:
    """Run as if on ``target``: vLLM's requested memory (total x utilisation, v1/worker/
    utils.py request_memory) made equal to the target's, and the batch defaults the target
    gets (EngineArgs.get_batch_defaults) passed explicitly, since this GPU would get its own.
    Reproduces memory, KV capacity, max concurrency and the start-up fit; not speed."""

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


def rehearse(
    target: str | GPU,
    here_total_gib: float,
    *,
    entry: str = "serve",
    util: float | None = None,
) -> Rehearsal:
    """The knobs that give this GPU (CUDA total ``here_total_gib``) ``target``'s budget."""
    from course_utils.core import knobs as knobs_mod

    g = target if isinstance(target, GPU) else get_gpu(target)
    if entry not in ("serve", "llm"):
        raise ValueError(f"entry must be 'serve' or 'llm', not {entry!r}")
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

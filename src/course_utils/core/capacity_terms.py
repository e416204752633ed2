"""The measured terms of the capacity model (``core.capacity.predict``), as data: what
``config.json`` does not give, each with how it was measured, where, and how it carries to
another GPU or model. All from the H200 lab host's vLLM 0.26.0 logs (GiB to two decimals).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    value: float
    unit: str
    how: str  # how it was measured
    source: str  # the recorded logs it comes from
    scales: str  # how it carries to another GPU / model


TERMS: dict[str, Term] = {
    # v1/worker/gpu/model_runner.py load_model profiles everything the loaded model holds
    "load_extra_gib": Term(
        0.105,
        "GiB",
        "'Model loading took 14.29 GiB' minus Qwen2.5-7B's parameter bytes counted from "
        "config.json (7,615,616,512 x 2 B = 14.185 GiB): buffers the model holds besides "
        "its parameters",
        "every H200 serve and LLM log of Qwen2.5-7B bf16 (14.29 GiB in all 40 starts)",
        "the same on any GPU (the loader allocates the same tensors); assumed for other "
        "dense 7-8B models until the probe's Llama-3-8B and AWQ cases measure them",
    ),
    "fp8_kv_load_gib": Term(
        0.03,
        "GiB",
        "'Model loading took 14.32 GiB' with kv_cache_dtype=fp8 against 14.29 GiB with the "
        "model's dtype, the same model and budget",
        "labs/results/h200-2026-12-02/grid-kv sweep-2/3 (two fp8 starts)",
        "assumed the same on any GPU; measured for Qwen2.5-7B only",
    ),
    # profile_run's forward pass: the compiled MLP holds gate_up (2 x intermediate) and the
    # activation (intermediate) at once, plus the residual stream
    "forward_factor": Term(
        1.03,
        "x",
        "peak activation at 16,384 tokens (LLM entry defaults on the H200: 2.09-2.15 GiB in "
        "7 starts) over 16,384 x (3 x intermediate + 3 x hidden) x 2 B = 2.06 GiB",
        "labs/results/h200-2026-11-29b knobs, knobs-repeat; h200-2026-11-29c knobs",
        "the same on any GPU for the same kernels (tensor shapes, not the GPU, set it)",
    ),
    # profile_run's floor on a cold start (torch.compile compiling); a start that loads the
    # compiled graphs from vLLM's cache peaks at the forward pass alone. Neither max_num_seqs
    # nor the vocabulary moves it; set from the bf16 case, checked by the Llama-3-8B case.
    "profile_floor_gib": Term(
        1.013,
        "GiB",
        "torch peak increase 1.04 GiB at 2,048 tokens / 256 requests (Qwen2.5-7B bf16) minus "
        "2 x 2,048 x 3,584 x 2 B = 0.027 GiB",
        "labs/results/h200x2-2026-11-30 capacity bf16-4090-serve (DEBUG memory profile)",
        "the same on any GPU for this vLLM (a buffer size, not a GPU property); re-measure on "
        "another vLLM version: one start with VLLM_LOGGING_LEVEL=DEBUG",
    ),
    # memory_profiling: growth of (CUDA used - torch reserved) over the profile (cuBLAS,
    # attention workspaces, kernel images)
    "non_torch_gib": Term(
        0.22,
        "GiB",
        "'0.22 GiB for non-torch memory' in every H200 log (Qwen2.5-7B bf16)",
        "every H200 serve and LLM log (40 starts)",
        "measured on the H200; another GPU architecture loads other kernels: the rehearsal "
        "reproduces the H200's value, not a 4090's",
    ),
}

# CUDA graphs (model_runner.py capture_model, "Graph capturing ... took X GiB"): taken after
# the KV cache, outside the budget. H200, Qwen2.5-7B bf16, by max_num_seqs.
CUDAGRAPH_GIB_BY_MAX_NUM_SEQS: dict[int, float] = {64: 0.21, 128: 0.37, 256: 0.54, 1024: 0.89}

# total - free at vLLM's first snapshot (CUDA context, NCCL) on the H200
CONTEXT_GIB = 0.51

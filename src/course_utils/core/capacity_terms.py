"""The measured terms of the capacity model (``core.capacity.predict``), as data.

vLLM 0.26.0 decides the KV cache from three measurements it takes at start-up
(v1/worker/gpu_worker.py ``determine_available_memory``, vllm/utils/mem_utils.py
``memory_profiling``): the weights as loaded, the torch peak during one dummy forward pass of
``max_num_batched_tokens`` tokens plus one sampler pass (v1/worker/gpu/model_runner.py
``profile_run``), and the non-torch memory that grew meanwhile. The model computes the shapes
from ``config.json``; what first principles do not give is here, each with the value, how it
was measured, where, and how it carries to another GPU or model. Every value is from the
H200 lab host's vLLM 0.26.0 logs (``labs/results/h200-2026-11-29*``, ``h200-2026-11-30``),
which log weights, peak activation and non-torch memory in GiB to two decimals.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Term", "TERMS", "CUDAGRAPH_GIB_BY_MAX_NUM_SEQS", "CONTEXT_GIB"]


@dataclass(frozen=True)
class Term:
    value: float
    unit: str
    how: str  # how it was measured
    source: str  # the recorded logs it comes from
    scales: str  # how it carries to another GPU / model


TERMS: dict[str, Term] = {
    # v1/worker/gpu/model_runner.py load_model: DeviceMemoryProfiler around the loader, so
    # everything the model holds after loading, not only its parameters
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
    # profile_run's forward pass: torch.compile'd MLP holds the gate_up output (2 x
    # intermediate) and the activation (intermediate) at once, plus the residual stream
    "forward_factor": Term(
        1.03,
        "x",
        "peak activation at 16,384 tokens (LLM entry defaults on the H200: 2.09-2.15 GiB in "
        "7 starts) over 16,384 x (3 x intermediate + 3 x hidden) x 2 B = 2.06 GiB",
        "labs/results/h200-2026-11-29b knobs, knobs-repeat; h200-2026-11-29c knobs",
        "the same on any GPU for the same kernels (tensor shapes, not the GPU, set it)",
    ),
    # profile_run's sampler pass (_dummy_sampler_run): min(max_num_batched_tokens,
    # max_num_seqs) rows of vocab logits and what the sampler allocates for them
    "logit_bytes": Term(
        7.0,
        "B per logit",
        "peak activation 1.04 GiB at 2,048 tokens and 1.07 GiB at 4,096 tokens with 1,024 "
        "requests (where the forward pass needs only 0.26 / 0.52 GiB), over 1,024 x 152,064 "
        "logits",
        "labs/results/h200-2026-11-30 decode12 (max_num_batched_tokens 2048 and 4096)",
        "assumed to scale with requests x vocab on any GPU: the probe's bf16-4090-serve case "
        "(256 requests) tests it",
    ),
    # memory_profiling: non_torch_increase = growth of (CUDA used - torch reserved) from
    # the first snapshot to after profiling (cuBLAS, attention workspaces, kernel images)
    "non_torch_gib": Term(
        0.22,
        "GiB",
        "'0.22 GiB for non-torch memory' in every H200 log (Qwen2.5-7B bf16)",
        "every H200 serve and LLM log (40 starts)",
        "measured on the H200; another GPU architecture loads other kernels: the rehearsal "
        "reproduces the H200's value, not a 4090's",
    ),
}

# v1/worker/gpu/model_runner.py capture_model ("Graph capturing finished in %.0f secs, took
# %.2f GiB"): taken AFTER the KV cache is allocated, outside the requested budget (the V2
# runner's profile_cudagraph_memory returns 0, so vLLM does not subtract it). H200,
# Qwen2.5-7B bf16, by max_num_seqs (the largest capture size follows it).
CUDAGRAPH_GIB_BY_MAX_NUM_SEQS: dict[int, float] = {64: 0.21, 128: 0.37, 256: 0.54, 1024: 0.89}

# total - free at vLLM's first snapshot (CUDA context, NCCL): 139.80 - 139.29 GiB on the H200
CONTEXT_GIB = 0.51

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
    # profile_run's peak below the forward pass, on a COLD start only (torch.compile
    # compiling): a start that loads the compiled graphs from vLLM's compile cache ("Directly
    # load the compiled graph(s) ... from the cache") peaks at the forward pass alone (2,048
    # tokens: 0.29 GiB cached against 1.04 cold, so a rehearsed 4090 pool grew from 115,920
    # to 130,016 tokens on a restart, labs/results/h200-2026-12-02/lab02-4090). A floor that neither max_num_seqs (256 vs
    # 1,024) nor the vocabulary (128,256 vs 152,064) moved, plus two hidden-state copies of
    # the token budget. Before the 2-GPU probe run this term was modelled as sampler rows x
    # vocab x 7 B, which predicted 0.27 GiB for 256 requests; vLLM logged 1.04 GiB and the
    # prediction missed the KV cache by +12.6 % (bf16) and +12.2 % (Llama-3-8B) at the 4090
    # budget. The floor is set from the bf16 case alone; the Llama case then checks it.
    "profile_floor_gib": Term(
        1.013,
        "GiB",
        "torch peak increase 1.04 GiB at 2,048 tokens / 256 requests (Qwen2.5-7B bf16) minus "
        "2 x 2,048 x 3,584 x 2 B = 0.027 GiB",
        "labs/results/h200x2-2026-11-30 capacity bf16-4090-serve (DEBUG memory profile)",
        "the same on any GPU for this vLLM (a buffer size, not a GPU property); re-measure on "
        "another vLLM version: one start with VLLM_LOGGING_LEVEL=DEBUG",
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

# ruff: noqa: UP031  - the %-format strings are copied verbatim from vLLM 0.26.0
"""The fake `vllm serve`'s start-up memory accounting, printed in vLLM 0.26.0's own formats.

Used by fake_vllm.py when FAKE_VLLM_GPU_TOTAL_BYTES is set (the CUDA total of the fake GPU).
The accounting is vLLM's (v1/worker/gpu_worker.py determine_available_memory; v1/worker/
utils.py request_memory; v1/core/kv_cache_utils.py get_num_blocks / get_kv_cache_capacity):
requested = ceil(total x util); available = requested - weights - torch peak increase -
non-torch increase; blocks = available // page_size // layers; tokens = int(blocks /
ceil(max_model_len / 16) x max_model_len). The three measured terms are this fake's own
physics (a made-up GPU), written here independently of course_utils.core.capacity:
weights = the config's parameter bytes + FAKE_BUFFERS; torch peak = the larger of the
forward pass (tokens x the MLP's live activations) and the sampler pass (requests x vocab x
LOGIT_BYTES); non-torch = NON_TORCH. Close to the H200's logs, not equal to the course's
constants: a fixture made with this fake checks the pipeline and vLLM's arithmetic, and only
a real run checks the physics.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

GIB = 1 << 30
FAKE_BUFFERS = 100 << 20  # bytes a loaded model holds besides its parameters (fake)
FORWARD = 1.02  # the fake's factor on the MLP's live activations
PROFILE_FLOOR = int(1.01 * GIB)  # the profile run's peak below the forward pass (fake)
NON_TORCH = int(0.22 * GIB)
CONTEXT = int(0.51 * GIB)  # CUDA context + NCCL before vLLM's first snapshot
QWEN = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "torch_dtype": "bfloat16", "model_type": "qwen2",
}


def gib(b: float) -> str:
    """vllm/utils/mem_utils.py format_gib."""
    return f"{round(b / GIB, 2)}"


def _config(model: str) -> dict[str, Any]:
    p = Path(model) / "config.json"
    return json.loads(p.read_text()) if p.is_file() else dict(QWEN)


def _weights(c: dict[str, Any]) -> int:
    h, i, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    linear = n * (h * (q + 2 * kv) + q * h + 3 * h * i)
    bias = n * (q + 2 * kv) if c.get("model_type") == "qwen2" else 0
    other = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings") else 2) + n * 2 * h + h
    quant = c.get("quantization_config")
    if quant:  # AWQ: packed int4, a fp16 scale and a 4-bit zero per group of 128
        lin_bytes = linear // 2 + linear // 128 * 2 + linear // 128 // 2
    else:
        lin_bytes = linear * 2
    return lin_bytes + (other + bias) * 2 + FAKE_BUFFERS


def account(
    model: str, util: float, total: int, mbt: int, max_model_len: int, seqs: int
) -> dict[str, Any]:
    """Every number vLLM would log at start-up, for this fake GPU."""
    c = _config(model)
    h, i, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    free = total - CONTEXT
    requested = math.ceil(total * util)
    weights = _weights(c)
    forward = mbt * (3 * i + 3 * h) * 2 * FORWARD
    floor = PROFILE_FLOOR + 2 * mbt * h * 2  # max_num_seqs does not move it (H200 logs)
    peak = int(max(forward, floor))
    available = requested - (weights + peak + NON_TORCH)
    page = 2 * 16 * c["num_key_value_heads"] * hd * 2
    blocks = max(int(available // page // n), 0)
    per_req = math.ceil(max_model_len / 16)
    cg = int(0.21 * GIB)
    return {
        "total": total, "free": free, "util": util, "requested": requested, "weights": weights,
        "peak": peak, "non_torch": NON_TORCH, "available": available, "blocks": blocks,
        "tokens": int(blocks / per_req * max_model_len), "concurrency": blocks / per_req,
        "per_token": page // 16 * n, "cudagraph": cg,
        "to_requested": requested - (weights + peak + NON_TORCH + cg) - (150 << 20),
        "to_gpu": free - (weights + peak + NON_TORCH + cg) - (150 << 20),
    }


def lines(m: dict[str, Any], mbt: int, max_model_len: int) -> list[tuple[str, str]]:
    """(level, message) in the order vLLM 0.26.0 logs them; the format strings are copied."""
    out = [
        # config/scheduler.py
        ("INFO", f"[scheduler.py:252] Chunked prefill is enabled with max_num_batched_tokens={mbt}."),
        # v1/worker/gpu_worker.py init_device
        ("INFO", "[gpu_worker.py:378] Using V2 Model Runner"),
        ("DEBUG", "[gpu_worker.py:392] worker requested memory: %sGiB" % gib(m["requested"])),
        # v1/worker/gpu/model_runner.py load_model
        ("INFO", "[model_runner.py:305] Model loading took %s GiB and %.6f seconds"
         % (gib(m["weights"]), 2.3)),
        # v1/worker/gpu_worker.py determine_available_memory
        ("DEBUG", "[gpu_worker.py:549] Initial free memory: %s GiB; Requested memory: %f (util), "
         "%s GiB" % (gib(m["free"]), m["util"], gib(m["requested"]))),
        ("DEBUG", "[gpu_worker.py:554] Free memory after profiling: %s GiB (total), %s GiB "
         "(within requested)" % (gib(m["free"] - m["weights"] - m["peak"] - m["non_torch"]),
                                 gib(m["requested"] - m["weights"] - m["peak"] - m["non_torch"]))),
        # vllm/utils/mem_utils.py MemoryProfilingResult.__repr__
        ("DEBUG", "[gpu_worker.py:559] Memory profiling takes %.2f seconds. Total non KV cache "
         "memory: %sGiB; torch peak memory increase: %sGiB; non-torch forward increase memory: "
         "%sGiB; weights memory: %sGiB." % (
             0.47, gib(m["weights"] + m["peak"] + m["non_torch"]), gib(m["peak"]),
             gib(m["non_torch"]), gib(m["weights"]))),
        ("INFO", "[gpu_worker.py:560] Available KV cache memory: %s GiB" % gib(m["available"])),
    ]
    if m["blocks"] > 0:
        # v1/core/kv_cache_utils.py get_kv_cache_configs
        out += [
            ("INFO", "[kv_cache_utils.py:2177] GPU KV cache size: %s tokens" % f"{m['tokens']:,}"),
            ("INFO", "[kv_cache_utils.py:2178] Maximum concurrency for %s tokens per request: "
             "%.2fx" % (f"{max_model_len:,}", m["concurrency"])),
            # v1/worker/gpu/model_runner.py capture_model
            ("INFO", "[model_runner.py:747] Graph capturing finished in %.0f secs, took %.2f GiB"
             % (5, m["cudagraph"] / GIB)),
            # v1/worker/gpu_worker.py compile_or_warm_up_model
            ("INFO", "[gpu_worker.py:857] Free memory on device (%s/%s GiB) on startup. Desired "
             "GPU memory utilization is (%s, %s GiB). Actual usage is %s GiB for weight, %s GiB "
             "for peak activation, %s GiB for non-torch memory, and %s GiB for CUDAGraph memory. "
             "Replace gpu_memory_utilization config with `--kv-cache-memory=%d` (%s GiB) to fit "
             "into requested memory, or `--kv-cache-memory=%d` (%s GiB) to fully utilize gpu "
             "memory. Current kv cache memory in use is %s GiB." % (
                 gib(m["free"]), gib(m["total"]), m["util"], gib(m["requested"]),
                 gib(m["weights"]), gib(m["peak"]), gib(m["non_torch"]), gib(m["cudagraph"]),
                 m["to_requested"], gib(m["to_requested"]), m["to_gpu"], gib(m["to_gpu"]),
                 gib(m["available"]))),
        ]
    return out


def print_lines(m: dict[str, Any], mbt: int, max_model_len: int) -> None:
    debug = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper() == "DEBUG"
    for level, msg in lines(m, mbt, max_model_len):
        if level == "INFO" or debug:
            print(f"(EngineCore pid=4242) {level} 11-30 10:00:05 {msg}", flush=True)

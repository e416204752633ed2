"""vLLM 0.26.0 start-up and `vllm bench serve` failures as one-line reasons."""

from __future__ import annotations

import re
from collections.abc import Callable

from course_utils.core.vllm_logs._common import MAX_REASON, last_match, one_line

# --------------------------------------------------------------------------------------
# start-up failures: (pattern, reason) rules, most specific first
# --------------------------------------------------------------------------------------


def _kv_too_small(m: re.Match[str], text: str) -> str:
    est = f"; the estimated max_model_len that fits is {m.group(4)}" if m.group(4) else ""
    return (
        f"not enough KV cache memory for max_model_len {m.group(1)}: needs {m.group(2)} "
        f"GiB, {m.group(3)} GiB available{est} (lower --max-model-len or raise "
        "--gpu-memory-utilization)"
    )


def _oom(m: re.Match[str], text: str) -> str:
    tried = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", m.group(0))
    extra = f" (tried to allocate {tried.group(1)})" if tried else ""
    return (
        f"CUDA out of memory{extra}: lower --gpu-memory-utilization, --max-num-seqs or "
        "--max-num-batched-tokens, or --max-model-len"
    )


def _port(m: re.Match[str], text: str) -> str:
    port = last_match(re.compile(r"--port[ =](\d+)"), text)
    where = f" ({port.group(1)})" if port else ""
    return f"port in use{where}: Address already in use; pick another --port"


Rule = tuple[re.Pattern[str], Callable[[re.Match[str], str], str]]
FAILURE_RULES: list[Rule] = [
    # v1/core/kv_cache_utils.py _check_enough_kv_cache_memory: "To serve at least one request
    # with the model's max seq len ({max_model_len}), ({needed} GiB KV cache is needed, which
    # is larger than the available KV cache memory ({available} GiB). Based on the available
    # memory, the estimated maximum model length is {n}. ..."
    (
        re.compile(
            r"To serve at least one request with the model's max seq len \((\d+)\), "
            r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV "
            r"cache memory \(([\d.]+) GiB\)\.(?: Based on the available memory, the "
            r"estimated maximum model length is (\d+)\.)?"
        ),
        _kv_too_small,
    ),
    # v1/core/kv_cache_utils.py: "No available memory for the cache blocks. Try increasing
    # `gpu_memory_utilization` when initializing the engine ..."
    (
        re.compile(r"No available memory for the cache blocks"),
        lambda m, t: (
            'weights do not fit: no memory left for the KV cache blocks ("No available '
            'memory for the cache blocks"); raise --gpu-memory-utilization, quantize, or '
            "use a bigger GPU"
        ),
    ),
    # v1/worker/utils.py request_memory: "Free memory on device {dev} ({free}/{total} GiB) on
    # startup is less than desired GPU memory utilization ({util}, {req} GiB). ..."
    (
        re.compile(
            r"Free memory on device \S* ?\(([\d.]+)/([\d.]+) GiB\) on startup is less "
            r"than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
        ),
        lambda m, t: (
            f"GPU memory already in use: {m.group(1)}/{m.group(2)} GiB free at startup, "
            f"--gpu-memory-utilization {m.group(3)} asks for {m.group(4)} GiB (another "
            "process holds the GPU, or lower the utilization)"
        ),
    ),
    # torch: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ..."
    (re.compile(r"CUDA out of memory\.?[^\n]*"), _oom),
    # config/scheduler.py: "max_num_batched_tokens ({a}) must be greater than or equal to
    # max_num_seqs ({b})."
    (
        re.compile(
            r"max_num_batched_tokens \((\d+)\) must be greater than or equal to "
            r"max_num_seqs \((\d+)\)"
        ),
        lambda m, t: (
            f"invalid knob combination: max_num_batched_tokens ({m.group(1)}) must be >= "
            f"max_num_seqs ({m.group(2)}); raise --max-num-batched-tokens with it"
        ),
    ),
    # config/scheduler.py: "max_num_batched_tokens ({a}) is smaller than max_model_len ({b})."
    (
        re.compile(r"max_num_batched_tokens \((\d+)\) is smaller than max_model_len \((\d+)\)"),
        lambda m, t: (
            f"invalid knob combination: max_num_batched_tokens ({m.group(1)}) < "
            f"max_model_len ({m.group(2)}) with chunked prefill off"
        ),
    ),
    # entrypoints/openai/api_server.py create_server_socket: "OSError: [Errno 98] Address
    # already in use" (the port is on the command line, earlier in the log)
    (re.compile(r"Address already in use"), _port),
    # argparse (utils/argparse_utils.py FlexibleArgumentParser):
    # "vllm serve: error: unrecognized arguments: --foo 1"
    (
        re.compile(r"error: unrecognized arguments: ([^\n]*)"),
        lambda m, t: f"unknown flag for vllm 0.26.0: {m.group(1).strip()}",
    ),
    (
        re.compile(r"error: (argument [^\n]*)"),
        lambda m, t: one_line(f"invalid argument: {m.group(1)}"),
    ),
]


def classify_failure(log_text: str, returncode: int | None = None) -> str:
    """One clear line saying why `vllm serve` (0.26.0) failed, from its log."""
    text = log_text or ""
    for pattern, reason in FAILURE_RULES:
        if m := last_match(pattern, text):
            return reason(m, text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the last line that names an error, else the last line
        if re.search(r"(Error|Exception|error:|ERROR)", ln):
            return one_line(re.sub(r"^\(?[A-Za-z]*\s*pid=\d+\)?\s*", "", ln))
    if lines:
        return one_line(lines[-1])
    if returncode is not None:
        return f"vllm serve exited with code {returncode}"
    return "vllm serve failed with an empty log"


def bench_failure_reason(log_text: str, returncode: int | None) -> str:
    """One line from a failed `vllm bench serve` log: its last error line, else its exit.
    The harness's own lines in the log ("# ...": the worker's pid, the call's phases) are
    not vLLM's and are skipped."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip() and not ln.startswith("# ")]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln or "Exception" in ln:
            return " ".join(ln.split())[:MAX_REASON]
    last = f" (last line: {lines[-1][:200]})" if lines else ""
    return f"vllm bench serve exited with code {returncode}{last}"


# --------------------------------------------------------------------------------------
# start-up facts
# --------------------------------------------------------------------------------------

# v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" and "Maximum concurrency for %s
# tokens per request: %.2fx"; v1/worker/gpu_worker.py: "Available KV cache memory: %s GiB";
# v1/worker/gpu_model_runner.py: "Model loading took %s GiB memory and %.6f seconds";
# compilation/monitor.py: "torch.compile took %.2f s in total" (absent with enforce_eager)

#!/usr/bin/env python3
"""A fake `vllm` executable for tests (vLLM 0.26.0 behaviour, no GPU).

`vllm serve MODEL [flags]` starts the HTTP double (double.py) on --host/--port, with an
"EngineCore" child process in the same process group, unless the args/env ask for a
failure, printed the way vLLM 0.26.0 prints it (texts copied from its source):
  --max-num-batched-tokens < --max-num-seqs     -> ValueError (config/scheduler.py)
  --max-model-len > FAKE_VLLM_KV_TOKENS (32768)  -> KV cache ValueError (v1/core/kv_cache_utils.py)
  --gpu-memory-utilization < 0.2                -> "No available memory for the cache blocks"
  --gpu-memory-utilization > 0.97 or FAKE_VLLM_FAIL=oom -> torch.OutOfMemoryError
  port already bound                             -> OSError [Errno 98] Address already in use
  unknown flag                                   -> argparse "unrecognized arguments"
  FAKE_VLLM_DIE_AFTER=N                          -> the server dies after N completions
  FAKE_VLLM_STARTUP_S=S                          -> bind, then wait S seconds before serving
  FAKE_VLLM_JIT_AT=N [FAKE_VLLM_JIT_STALL_S=S]   -> log vLLM's JIT-monitor line at the Nth
                                                    completion (once per server) and stall S s
  FAKE_VLLM_STUBBORN=1                           -> the engine child ignores SIGINT/SIGTERM
  FAKE_VLLM_STARTS=path                          -> append one line per `serve` start
  FAKE_VLLM_GPU_TOTAL_BYTES=N                    -> a GPU of N bytes (CUDA total): vLLM's
                                                    start-up memory lines, DEBUG ones with
                                                    VLLM_LOGGING_LEVEL=DEBUG (fake_memory.py)
  --no-enable-prefix-caching                     -> no prefix cache (0.26.0: on by default)
`vllm bench serve [flags]` is the client: sends the random workload to --base-url and
writes the result JSON with the keys of vllm/benchmarks/serve.py (0.26.0). Its prompts
depend on --seed like RandomDataset's (same seed, same prompts); FAKE_VLLM_BENCH_ARGV=path
appends one JSON line per call with its argv.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# ------------------------------------------------------------------------------ serve

SERVE_FLAGS_WITH_VALUE = [
    "--host", "--port", "--load-format", "--seed", "--max-num-seqs", "--max-num-batched-tokens",
    "--gpu-memory-utilization", "--max-model-len", "--quantization", "--kv-cache-dtype",
    "--speculative-config", "--tensor-parallel-size", "--served-model-name", "--tokenizer",
    "--dtype", "--block-size", "--swap-space", "--max-num-partial-prefills",
]
SERVE_BOOL_FLAGS = [
    "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-prefix-caching",
    "--no-enable-prefix-caching", "--enforce-eager", "--no-enforce-eager",
    "--disable-log-requests", "--disable-log-stats",
]


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("model_tag")
    for f in SERVE_FLAGS_WITH_VALUE:
        p.add_argument(f)
    for f in SERVE_BOOL_FLAGS:
        p.add_argument(f, action="store_true")
    return p


def _raise_value_error(msg: str) -> None:
    print("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.26.0", flush=True)
    try:
        raise ValueError(msg)
    except ValueError:
        traceback.print_exc()
    sys.exit(1)


def _engine_child(stubborn: bool) -> subprocess.Popen[bytes]:
    code = (
        "import signal,time\n"
        + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if stubborn else "")
        + "while True: time.sleep(0.2)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine (this flag also controls CPU memory reservation on the CPU "
    "backend, despite its name). See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def _memory_mode(
    model: str, util: float, total: int, mbt: int, max_model_len: int, seqs: int
) -> int:
    """Print vLLM's start-up memory lines (fake_memory.py); fail as vLLM does when the
    budget is short. The KV tokens, unless FAKE_VLLM_KV_TOKENS pins them."""
    import fake_memory as fm

    m = fm.account(model, util, total, mbt, max_model_len, seqs)
    if m["free"] < m["requested"]:  # v1/worker/utils.py request_memory
        _raise_value_error(
            f"Free memory on device cuda:0 ({fm.gib(m['free'])}/{fm.gib(total)} GiB) on startup "
            f"is less than desired GPU memory utilization ({util}, {fm.gib(m['requested'])} "
            "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
    fm.print_lines(m, mbt, max_model_len)
    if m["blocks"] <= 0:
        _raise_value_error(NO_MEMORY)
    if max_model_len > m["tokens"]:
        need = max_model_len * m["per_token"] / fm.GIB
        _raise_value_error(
            f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({need:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({m['available'] / fm.GIB:.2f} GiB). Based on the available memory, the "
            f"estimated maximum model length is {m['tokens']}. Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
            "decreasing `max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    return int(os.environ.get("FAKE_VLLM_KV_TOKENS") or m["tokens"])


def serve(argv: list[str]) -> int:
    a = serve_parser().parse_args(argv)
    starts = os.environ.get("FAKE_VLLM_STARTS")
    if starts:
        with open(starts, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "argv": argv}) + "\n")
    host = a.host or "127.0.0.1"
    port = int(a.port or 8000)
    total = int(os.environ.get("FAKE_VLLM_GPU_TOTAL_BYTES", "0"))  # > 0: memory mode
    large = total >= 70 * (1 << 30)  # EngineArgs.get_batch_defaults, serve entry
    max_num_seqs = int(a.max_num_seqs or (1024 if large else 256))
    mbt = int(a.max_num_batched_tokens or (8192 if large else 2048))
    util = float(a.gpu_memory_utilization or (0.92 if total else 0.9))
    kv_tokens = int(os.environ.get("FAKE_VLLM_KV_TOKENS", "32768"))
    max_model_len = int(a.max_model_len or 4096)
    print("INFO 11-29 10:00:00 [utils.py:1] non-default args: "
          f"{{'model_tag': '{a.model_tag}', 'port': {port}}}", flush=True)
    if mbt < max_num_seqs:  # default 2048 = 0.26.0 serve default on a < 70 GiB GPU
        # vllm/config/scheduler.py SchedulerConfig.verify_max_model_len
        _raise_value_error(
            f"max_num_batched_tokens ({mbt}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs})."
        )
    if util > 0.97 or os.environ.get("FAKE_VLLM_FAIL") == "oom":
        print("(EngineCore pid=4242) ERROR 11-29 10:00:05 [core.py:1] EngineCore failed to start.",
              flush=True)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has "
              "a total capacity of 23.52 GiB of which 512.00 MiB is free.", flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above. "
              "Failed core proc(s): {}", flush=True)
        return 1
    if total:
        kv_tokens = _memory_mode(a.model_tag, util, total, mbt, max_model_len, max_num_seqs)
    elif util < 0.2:
        # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory
        _raise_value_error(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine (this flag also controls CPU memory reservation on "
            "the CPU backend, despite its name). See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    if max_model_len > kv_tokens:
        _raise_value_error(
            f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({max_model_len / 18724:.2f} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({kv_tokens / 18724:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {kv_tokens}. Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
            "decreasing `max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    from double import Engine, make_server

    engine = Engine(
        a.served_model_name or a.model_tag, max_num_seqs, kv_tokens,
        tpot_s=float(os.environ.get("FAKE_VLLM_TPOT_S", "0.002")),
        prefill_s_per_token=float(os.environ.get("FAKE_VLLM_PREFILL_S_PER_TOKEN", "2e-5")),
        die_after=int(os.environ["FAKE_VLLM_DIE_AFTER"]) if os.environ.get(
            "FAKE_VLLM_DIE_AFTER") else None,
        prefix_caching=not a.no_enable_prefix_caching,
        jit_at=int(os.environ["FAKE_VLLM_JIT_AT"]) if os.environ.get("FAKE_VLLM_JIT_AT") else None,
        jit_stall_s=float(os.environ.get("FAKE_VLLM_JIT_STALL_S", "0")),
    )
    try:
        srv = make_server(host, port, engine)  # vllm binds before starting the engine
    except OSError:
        traceback.print_exc()
        return 1
    child = _engine_child(os.environ.get("FAKE_VLLM_STUBBORN") == "1")
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))
    print(f"INFO 11-29 10:00:09 [api_server.py:1] Starting vLLM API server 0 on "
          f"http://{host}:{port}", flush=True)

    def _shutdown(signum: int, frame: object) -> None:
        print("INFO Shutting down FastAPI HTTP server.", flush=True)
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, _shutdown)
    signal.signal(signal.SIGTERM, _shutdown)
    try:
        srv.serve_forever(poll_interval=0.05)
    finally:
        srv.server_close()
        if os.environ.get("FAKE_VLLM_STUBBORN") != "1":
            child.terminate()
            child.wait(timeout=5)
    return 0


# ------------------------------------------------------------------------------ bench serve


def bench_parser() -> argparse.ArgumentParser:
    """Only flags that 0.26.0 `vllm bench serve` has (see vllm_0_26_0_bench_serve_flags.txt)."""
    p = argparse.ArgumentParser(prog="vllm bench serve")
    p.add_argument("--backend", default="openai")
    p.add_argument("--base-url")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--endpoint", default="/v1/completions")
    p.add_argument("--model")
    p.add_argument("--tokenizer")
    p.add_argument("--dataset-name", default="random")
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--random-prefix-len", type=int, default=0)
    p.add_argument("--random-range-ratio", default="0.0")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--percentile-metrics", default=None)
    p.add_argument("--metric-percentiles", default="99")
    p.add_argument("--goodput", nargs="+")
    p.add_argument("--save-result", action="store_true")
    p.add_argument("--save-detailed", action="store_true")
    p.add_argument("--result-dir")
    p.add_argument("--result-filename")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--num-warmups", type=int, default=0)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--label")
    p.add_argument("--metadata", nargs="*")
    return p


class Out:
    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.success = False
        self.ttft = 0.0
        self.latency = 0.0
        self.itl: list[float] = []
        self.start_time = 0.0
        self.output_tokens = 0
        self.generated_text = ""
        self.error = ""


def _request(url: str, model: str, prompt: str, prompt_len: int, max_tokens: int,
             ignore_eos: bool) -> Out:
    """Like async_request_openai_completions (benchmarks/lib/endpoint_request_func.py)."""
    out = Out(prompt_len)
    u = urlparse(url)
    payload = {"model": model, "prompt": prompt, "repetition_penalty": 1.0,
               "max_tokens": max_tokens, "logprobs": None, "stream": True,
               "stream_options": {"include_usage": True}}
    if ignore_eos:
        payload["ignore_eos"] = True
    st = time.perf_counter()
    out.start_time = st
    last = st
    try:
        conn = HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("POST", u.path, body=json.dumps(payload),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = resp.reason or ""
            return out
        first = False
        for raw in resp:
            line = raw.decode().strip()
            if not line or line.startswith(":"):
                continue
            chunk = line.removeprefix("data: ")
            if chunk == "[DONE]":
                continue
            data = json.loads(chunk)
            if choices := data.get("choices"):
                now = time.perf_counter()
                if not first:
                    first = True
                    out.ttft = now - st
                else:
                    out.itl.append(now - last)
                last = now
                out.generated_text += choices[0].get("text") or ""
            elif usage := data.get("usage"):
                out.output_tokens = usage.get("completion_tokens")
                if (pt := usage.get("prompt_tokens")) is not None:
                    out.prompt_len = pt
        conn.close()
        if first:
            out.success = True
        else:
            out.error = ("Never received a valid chunk to calculate TTFT."
                         "This response will be marked as failed!")
        out.latency = last - st
    except Exception:
        out.success = False
        out.error = traceback.format_exc()
    return out


def bench_serve(argv: list[str]) -> int:
    a = bench_parser().parse_args(argv)
    print(a, flush=True)
    if log := os.environ.get("FAKE_VLLM_BENCH_ARGV"):
        with open(log, "a") as fh:
            fh.write(json.dumps(argv) + "\n")
    random.seed(a.seed)
    np.random.seed(a.seed)
    if a.dataset_name != "random":
        raise SystemExit("fake bench: only --dataset-name random")
    if a.backend in ("vllm", "openai"):
        a.ignore_eos = True  # serve.py: random datasets default to ignoring EOS
    base = a.base_url or f"http://{a.host}:{a.port}"
    url = base + a.endpoint
    # like RandomDataset: the prompts are a function of --seed (one shared prefix per run)
    prefix = " ".join(f"s{a.seed}p{i}" for i in range(a.random_prefix_len))
    prompts = [
        ((prefix + " ") if prefix else "")
        + " ".join(f"s{a.seed}w{k}_{i}" for i in range(a.random_input_len))
        for k in range(a.num_prompts)
    ]
    plen = a.random_prefix_len + a.random_input_len
    goodput = {}
    for pair in a.goodput or []:
        k, v = pair.split(":")
        goodput[k] = float(v)
    rng = np.random.default_rng(a.seed)
    outs: list[Out | None] = [None] * a.num_prompts
    sem = threading.Semaphore(a.max_concurrency) if a.max_concurrency else None

    def worker(i: int) -> None:
        if sem:
            sem.acquire()
        try:
            outs[i] = _request(url, a.model, prompts[i], plen, a.random_output_len, a.ignore_eos)
        finally:
            if sem:
                sem.release()

    print("Starting main benchmark run...", flush=True)
    t0 = time.perf_counter()
    threads = []
    for i in range(a.num_prompts):
        th = threading.Thread(target=worker, args=(i,))
        th.start()
        threads.append(th)
        if not math.isinf(a.request_rate):
            time.sleep(rng.gamma(a.burstiness, 1.0 / (a.request_rate * a.burstiness)))
    for th in threads:
        th.join()
    dur = time.perf_counter() - t0
    done = [o for o in outs if o is not None]
    ok = [o for o in done if o.success]
    lens = [(o.output_tokens or len(o.generated_text.split())) if o.success else 0 for o in done]
    ok_lens = [n for o, n in zip(done, lens, strict=True) if o.success]
    ttfts = [o.ttft for o in ok]
    tpots = [(o.latency - o.ttft) / (n - 1) for o, n in zip(ok, ok_lens, strict=True) if n > 1]
    itls = [x for o in ok for x in o.itl]
    e2els = [o.latency for o in ok]
    good = 0
    if goodput:
        for o, n in zip(ok, ok_lens, strict=True):
            tpot = (o.latency - o.ttft) / (n - 1) if n > 1 else 0.0
            vals = {"ttft": o.ttft, "tpot": tpot, "e2el": o.latency}
            if all(vals[k] <= v / 1000.0 for k, v in goodput.items()):
                good += 1
    pcts = [float(p) for p in a.metric_percentiles.split(",")]
    selected = (a.percentile_metrics or "ttft,tpot,itl").split(",")

    # key order as vllm/benchmarks/serve.py main_async + benchmark()
    result: dict = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": a.backend,
        "backend": a.backend,
        "label": a.label,
        "model_id": a.model,
        "tokenizer_id": a.tokenizer or a.model,
        "num_prompts": a.num_prompts,
    }
    for item in a.metadata or []:
        k, v = item.split("=", 1)
        result[k.strip()] = v.strip()
    result.update({
        "request_rate": a.request_rate if a.request_rate < float("inf") else "inf",
        "burstiness": a.burstiness,
        "max_concurrency": a.max_concurrency,
        "duration": dur,
        "completed": len(ok),
        "failed": len(done) - len(ok),
        "total_input_tokens": sum(o.prompt_len for o in ok),
        "total_output_tokens": sum(lens),
        "request_throughput": len(ok) / dur,
        "request_goodput": good / dur if goodput else None,
        "output_throughput": sum(lens) / dur,
        "total_token_throughput": (sum(o.prompt_len for o in ok) + sum(lens)) / dur,
        "input_lens": [o.prompt_len for o in done],
        "output_lens": lens,
        "ttfts": [o.ttft for o in done],
        "itls": [o.itl for o in done],
        "start_times": [o.start_time for o in done],
        "generated_texts": [o.generated_text for o in done],
        "errors": [o.error for o in done],
        "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": 0,
        "rtfx": 0.0,
    })
    series = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    for name in ("ttft", "tpot", "itl", "e2el"):
        if name not in selected:
            continue
        xs = series[name] or 0
        result[f"mean_{name}_ms"] = float(np.mean(xs) * 1000)
        result[f"median_{name}_ms"] = float(np.median(xs) * 1000)
        result[f"std_{name}_ms"] = float(np.std(xs) * 1000)
        for p in pcts:
            word = str(int(p)) if int(p) == p else str(p)
            result[f"p{word}_{name}_ms"] = float(np.percentile(xs, p) * 1000)
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print("{:<40} {:<10}".format("Successful requests:", len(ok)))
    print("{:<40} {:<10}".format("Failed requests:", len(done) - len(ok)), flush=True)
    if not a.save_detailed:
        for f in ("input_lens", "output_lens", "start_times", "ttfts", "itls",
                  "generated_texts", "errors"):
            result.pop(f, None)
    if a.save_result:
        name = a.result_filename or f"{a.backend}-{a.request_rate}qps-fake.json"
        path = Path(a.result_dir or ".") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:2] == ["bench", "serve"]:
        return bench_serve(argv[2:])
    print(f"fake vllm: unsupported command {argv!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

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
  --data-parallel-size N                         -> N engines behind the one endpoint, each with
                                                    its own slots, KV pool and /metrics series
                                                    (label engine="i"), requests balanced as
                                                    vLLM's DP client does: ~N times the capacity
  --tensor-parallel-size N                       -> one engine, per-token and prefill time
                                                    divided by 0.75 N (a fake factor: all-reduce
                                                    costs), N times the KV pool
  The start-up lines (KV cache size, init engine, model loading) are printed per process
  with vLLM's prefixes: "(EngineCore pid=..)", "(EngineCore_DP<i> pid=..)", "(Worker_TP<i>
  pid=..)", "(Worker_DP<i> pid=..)" (vllm/v1/engine/core.py,
  vllm/v1/executor/multiproc_executor.py).
`vllm bench serve [flags]` is the client: sends the random workload to --base-url and
writes the result JSON with the keys of vllm/benchmarks/serve.py (0.26.0). Its prompts
depend on --seed like RandomDataset's (same seed, same prompts); FAKE_VLLM_BENCH_ARGV=path
appends one JSON line per call with its argv. It prints vLLM's first bench log line
("INFO MM-DD HH:MM:SS [utils.py:90] Sampling input_len ...", local time) once its
arguments are parsed.
Both behave the same run as this executable or called in-process (``main(argv)``, as
course_utils.lab.benchworker does):
  FAKE_VLLM_IMPORTS=path                         -> append one line per import of this module
  FAKE_VLLM_CRASH_ONCE=path                      -> the first `bench serve` (anywhere) that
                                                    finds no file at path creates it and
                                                    dies at once (os._exit(3), no result)
`vllm bench sweep serve` runs the sweep like vLLM 0.26.0 (see bench_sweep_serve).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
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
if os.environ.get("FAKE_VLLM_IMPORTS"):
    with open(os.environ["FAKE_VLLM_IMPORTS"], "a") as _fh:
        _fh.write(f"{os.getpid()}\n")

# ------------------------------------------------------------------------------ serve

SERVE_FLAGS_WITH_VALUE = [
    "--host", "--port", "--load-format", "--seed", "--max-num-seqs", "--max-num-batched-tokens",
    "--gpu-memory-utilization", "--max-model-len", "--quantization", "--kv-cache-dtype",
    "--speculative-config", "--tensor-parallel-size", "--served-model-name", "--tokenizer",
    "--dtype", "--block-size", "--swap-space", "--max-num-partial-prefills",
    "--data-parallel-size",
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
    from double import Engine, Families, make_server

    dp = int(a.data_parallel_size or 1)
    tp = int(a.tensor_parallel_size or 1)
    speed = 0.75 * tp if tp > 1 else 1.0  # fake: TP shortens each step, less than N-fold
    fams = Families()
    engines = [
        Engine(
            a.served_model_name or a.model_tag, max_num_seqs, kv_tokens * tp,
            tpot_s=float(os.environ.get("FAKE_VLLM_TPOT_S", "0.002")) / speed,
            prefill_s_per_token=float(os.environ.get("FAKE_VLLM_PREFILL_S_PER_TOKEN",
                                                     "2e-5")) / speed,
            die_after=int(os.environ["FAKE_VLLM_DIE_AFTER"]) if os.environ.get(
                "FAKE_VLLM_DIE_AFTER") else None,
            prefix_caching=not a.no_enable_prefix_caching,
            jit_at=int(os.environ["FAKE_VLLM_JIT_AT"]) if os.environ.get(
                "FAKE_VLLM_JIT_AT") else None,
            jit_stall_s=float(os.environ.get("FAKE_VLLM_JIT_STALL_S", "0")),
            index=i, families=fams,
        )
        for i in range(dp)
    ]
    engine = engines if dp > 1 else engines[0]
    try:
        srv = make_server(host, port, engine)  # vllm binds before starting the engine
    except OSError:
        traceback.print_exc()
        return 1
    children = [_engine_child(os.environ.get("FAKE_VLLM_STUBBORN") == "1") for _ in range(dp)]
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))
    if not total:  # memory mode printed vLLM's memory lines already (fake_memory.py)
        _startup_lines(dp, tp, kv_tokens, max_model_len, [c.pid for c in children])
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
            for child in children:
                child.terminate()
                child.wait(timeout=5)
    return 0


def _startup_lines(dp: int, tp: int, kv_tokens: int, max_model_len: int,
                   pids: list[int]) -> None:
    """The start-up lines vLLM 0.26.0 logs, with its process prefixes: the engine core
    (EngineCore, or EngineCore_DP<i> with data parallelism: v1/engine/core.py) logs the KV
    pool (v1/core/kv_cache_utils.py) and its init time (v1/engine/core.py); the model is
    loaded by the engine core itself with one GPU per engine, by Worker_TP<i> processes with
    tensor or data parallelism (Worker_TP<r>, Worker_DP<i>: v1/executor/multiproc_executor.py;
    config/parallel.py picks the multiprocessing executor when the world across DP is > 1)."""
    weights = 14.29 / tp
    for i in range(dp):
        core = f"EngineCore_DP{i}" if dp > 1 else "EngineCore"
        pid = pids[i]
        # the worker's name: "Worker" + "_DP<i>" with DP + "_TP<r>" with TP (multiproc_executor
        # .py); with neither the engine core runs the model itself (uni executor)
        dp_part = f"_DP{i}" if dp > 1 else ""
        loaders = (
            [f"Worker{dp_part}" + (f"_TP{r}" if tp > 1 else "") for r in range(tp)]
            if dp > 1 or tp > 1 else [core]
        )
        for r, who in enumerate(loaders):
            wpid = pid if who == core else pid + 100 + r
            print(f"({who} pid={wpid}) INFO 11-29 10:00:03 [model_runner.py:305] Model loading "
                  f"took {weights:.2f} GiB and 2.131819 seconds", flush=True)
            print(f"({who} pid={wpid}) INFO 11-29 10:00:05 [gpu_worker.py:560] Available KV "
                  f"cache memory: {kv_tokens / 18724:.2f} GiB", flush=True)
        toks, conc = kv_tokens * tp, kv_tokens * tp / max_model_len
        print(f"({core} pid={pid}) INFO 11-29 10:00:05 [kv_cache_utils.py:2177] GPU KV cache "
              f"size: {toks:,} tokens", flush=True)
        print(f"({core} pid={pid}) INFO 11-29 10:00:05 [kv_cache_utils.py:2178] Maximum "
              f"concurrency for {max_model_len:,} tokens per request: {conc:.2f}x", flush=True)
        print(f"({core} pid={pid}) INFO 11-29 10:00:08 [core.py:340] init engine (profile, "
              f"create kv cache, warmup model) took {5.0 + i:.2f} s (compilation: 2.50 s)",
              flush=True)


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
    p.add_argument("--dataset-path")
    p.add_argument("--timed-trace-chunk-hash-size", type=int, default=16)
    p.add_argument("--timed-trace-sec-multiplier", type=float, default=1.0)
    p.add_argument("--self-timed", action=argparse.BooleanOptionalAction, default=None)
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


def _timed_trace(a: argparse.Namespace) -> tuple[list[str], list[int], list[int], list[float]]:
    """Like TimedTrace (datasets.py): the first --num-prompts lines; each hash id is a chunk
    of tokens that is the same for the same id and chunk size (vLLM seeds them from
    hash(f"{id}:{size}")); send times are timestamp * --timed-trace-sec-multiplier."""
    prompts, plens, olens, delays = [], [], [], []
    chunk = a.timed_trace_chunk_hash_size
    # the server tokenizes the decoded random tokens again: this many tokens per sampled one
    ratio = float(os.environ.get("FAKE_VLLM_PROMPT_TOKEN_RATIO", "1"))
    with open(a.dataset_path) as fh:
        lines = fh.readlines()
    for line in lines[: a.num_prompts]:
        e = json.loads(line)
        left, words, sampled = e["input_length"], [], 0
        for h in e.get("hash_ids", []):
            size = chunk if left >= chunk else left
            words += [f"t{h}:{size}_{j}" for j in range(round(size * ratio))]
            sampled += size
            left -= size
            if left <= 0:
                break
        prompts.append(" ".join(words))
        plens.append(sampled)
        olens.append(e["output_length"])
        delays.append(float(e["timestamp"]) * a.timed_trace_sec_multiplier)
    if a.self_timed is False:
        raise SystemExit("fake bench: timed_trace without --self-timed is not faked")
    return prompts, plens, olens, delays


def bench_serve(argv: list[str]) -> int:
    a = bench_parser().parse_args(argv)
    print(a, flush=True)
    crash = os.environ.get("FAKE_VLLM_CRASH_ONCE")
    if crash and not os.path.exists(crash):
        Path(crash).write_text(str(os.getpid()))
        os._exit(3)
    if a.dataset_name == "timed_trace":  # TimedTrace.__init__ prints this (no log stamp)
        print(f"timed-trace: chunk_size: {a.timed_trace_chunk_hash_size}, "
              f"sec_multiplier: {a.timed_trace_sec_multiplier}, ...", flush=True)
    else:
        print(f"INFO {datetime.now().strftime('%m-%d %H:%M:%S')} [utils.py:90] Sampling "
              f"input_len from [{a.random_input_len}, {a.random_input_len}] and output_len "
              f"from [{a.random_output_len}, {a.random_output_len}]", flush=True)
    if log := os.environ.get("FAKE_VLLM_BENCH_ARGV"):
        with open(log, "a") as fh:
            fh.write(json.dumps(argv) + "\n")
    random.seed(a.seed)
    np.random.seed(a.seed)
    base = a.base_url or f"http://{a.host}:{a.port}"
    url = base + a.endpoint
    if a.dataset_name == "timed_trace":
        a.ignore_eos = True  # serve.py: timed_trace ignores EOS, self-timed unless told not
        prompts, plens, olens, delays = _timed_trace(a)
        a.num_prompts = len(prompts)
    elif a.dataset_name == "random":
        if a.backend in ("vllm", "openai"):
            a.ignore_eos = True  # serve.py: random datasets default to ignoring EOS
        # like RandomDataset: the prompts are a function of --seed (one shared prefix per run)
        prefix = " ".join(f"s{a.seed}p{i}" for i in range(a.random_prefix_len))
        prompts = [
            ((prefix + " ") if prefix else "")
            + " ".join(f"s{a.seed}w{k}_{i}" for i in range(a.random_input_len))
            for k in range(a.num_prompts)
        ]
        plens = [a.random_prefix_len + a.random_input_len] * a.num_prompts
        olens = [a.random_output_len] * a.num_prompts
        delays = None
    else:
        raise SystemExit("fake bench: only --dataset-name random or timed_trace")
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
            outs[i] = _request(url, a.model, prompts[i], plens[i], olens[i], a.ignore_eos)
        finally:
            if sem:
                sem.release()

    print("Starting main benchmark run...", flush=True)
    t0 = time.perf_counter()
    threads = []
    for i in range(a.num_prompts):
        if delays is not None:  # self-timed: at start + timestamp * multiplier (serve.py)
            time.sleep(max(0.0, t0 + delays[i] - time.perf_counter()))
        th = threading.Thread(target=worker, args=(i,))
        th.start()
        threads.append(th)
        if delays is None and not math.isinf(a.request_rate):
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


# ------------------------------------------------------------------------------ bench sweep
# `vllm bench sweep serve`, the parts course_utils.lab.grid uses, after the 0.26.0 source
# (vllm/benchmarks/sweep/serve.py, param_sweep.py, server.py): folders, file names, markers,
# --resume, the flags appended to the bench command, the server's process group killed.


def _cmd_key(k: str) -> list[str]:
    cands = [k, k.replace("-", "_"), k.replace("_", "-")]  # _iter_param_key_candidates
    return ["--" + c for c in reversed(cands)]


def _apply_to_cmd(item: dict, cmd: list[str]) -> list[str]:
    cmd = list(cmd)
    for k, v in item.items():
        if k == "_benchmark_name":
            continue
        flag = next(iter(_cmd_key(k if not isinstance(v, bool) or v else "no-" + k)))
        pair = [flag] if isinstance(v, bool) else [flag, str(v)]
        for cand in _cmd_key(k):
            if cand in cmd:
                i = cmd.index(cand)
                cmd[i:i + len(pair)] = pair
                break
        else:
            cmd.extend(pair)
    return cmd


def _item_name(item: dict) -> str:
    if "_benchmark_name" in item:
        return str(item["_benchmark_name"])
    return "-".join(f"{k}={v}" for k, v in item.items())


def _server_address(cmd: list[str]) -> str:
    host = cmd[cmd.index("--host") + 1] if "--host" in cmd else "localhost"
    port = int(cmd[cmd.index("--port") + 1]) if "--port" in cmd else 8000
    return f"http://{host}:{port}"


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: int) -> None:
    t0 = time.monotonic()
    while True:
        u = urlparse(url)
        try:
            conn = HTTPConnection(u.hostname, u.port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"Server process crashed with return code {proc.returncode}")
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"Server failed to become ready within {timeout} seconds.")
        time.sleep(0.2)


def _sweep_combo(a: argparse.Namespace, exp: Path, item: dict, bench_cmd: list[str],
                 after: list[str]) -> list[dict]:
    base = exp / ("SERVE--" + _item_name(item)).replace("/", "_")
    if (base / "summary.json").exists():
        return json.loads((base / "summary.json").read_text())
    serve_cmd = _apply_to_cmd(item, shlex.split(a.serve_cmd))
    out = None if a.show_stdout else subprocess.DEVNULL
    print("[BEGIN SERVER]")
    print(f"Server overrides: {item}")
    print(f"Server command: {serve_cmd}", flush=True)
    proc = subprocess.Popen(serve_cmd, start_new_session=True, stdout=out,
                            env=os.environ | {"VLLM_SERVER_DEV_MODE": "1"})
    data = []
    try:
        _wait_ready(proc, _server_address(serve_cmd), a.server_ready_timeout)
        for n in range(a.num_runs):
            path = base / f"run={n}.json"
            cmd = [*bench_cmd, "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
                   "--result-dir", str(path.parent), "--result-filename", path.name]
            print("[BEGIN BENCHMARK]")
            print(f"Benchmark command: {cmd}", flush=True)
            if path.exists():
                print("Found existing results.")
                print("[SKIPPED BENCHMARK]", flush=True)
                run = json.loads(path.read_text())
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(cmd, stdout=out, check=True)
                if after:
                    subprocess.run(after, stdout=out, check=True)
                run = json.loads(path.read_text())
            run["run_number"] = n
            run.update(item)
            path.write_text(json.dumps(run, indent=4))
            print("[END BENCHMARK]", flush=True)
            data.append(run)
    finally:
        if proc.poll() is None:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    print("[END SERVER]", flush=True)
    (base / "summary.json").write_text(json.dumps(data, indent=4))
    return data


def bench_sweep_serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="vllm bench sweep serve")
    for f in ("--serve-cmd", "--bench-cmd"):
        p.add_argument(f, required=True)
    p.add_argument("--after-bench-cmd")
    p.add_argument("--show-stdout", action="store_true")
    p.add_argument("--server-ready-timeout", type=int, default=300)
    p.add_argument("--serve-params")
    p.add_argument("-o", "--output-dir", default="results")
    p.add_argument("-e", "--experiment-name", required=True)
    p.add_argument("--num-runs", type=int, default=3)
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    items = json.loads(Path(a.serve_params).read_text()) if a.serve_params else [{}]
    exp = Path(a.output_dir) / a.experiment_name
    if a.resume and not exp.exists():
        raise ValueError(f"Cannot resume from non-existent experiment_dir={exp}")
    if not a.resume and exp.exists():
        raise ValueError(f"Cannot overwrite existing experiment_dir={exp}")
    after = shlex.split(a.after_bench_cmd) if a.after_bench_cmd else []
    rows = []
    try:
        for item in items:
            rows += _sweep_combo(a, exp, item, shlex.split(a.bench_cmd), after)
    except BaseException as exc:
        raise RuntimeError("The script was terminated early. Use `--resume` "
                           "to continue the script from its last checkpoint.") from exc
    keys = sorted({k for r in rows for k in r if not isinstance(r[k], list | dict)})
    with open(exp / "summary.csv", "w") as fh:
        fh.write("," + ",".join(keys) + "\n")
        for i, r in enumerate(rows):
            fh.write(f"{i}," + ",".join(str(r.get(k, "")) for k in keys) + "\n")
    print(f"Experiment has been saved at: {exp}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:3] == ["bench", "sweep", "serve"]:
        return bench_sweep_serve(argv[3:])
    if argv[:2] == ["bench", "serve"]:
        return bench_serve(argv[2:])
    print(f"fake vllm: unsupported command {argv!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

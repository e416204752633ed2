"""A local HTTP double of `vllm serve` (0.26.0) for tests: 127.0.0.1 only, stdlib + prometheus_client.

Endpoints: GET /health, GET /v1/models, GET /metrics, POST /v1/completions (streaming SSE
like vLLM: `data: {...}` chunks with choices[0].text, a final usage chunk when
stream_options.include_usage, then `data: [DONE]`).

A toy scheduler makes the metrics move with load: `max_num_seqs` slots; a request waits
for a slot (vllm:num_requests_waiting), then runs (vllm:num_requests_running), holding
prompt+output tokens of a KV pool (vllm:kv_cache_usage_perc). TPOT grows with the number
running, so the knob has the direction the lessons describe. Metric names and label names
(model_name, engine) are those of vllm/v1/metrics/loggers.py in 0.26.0.

Prefix caching (on by default, as in 0.26.0): whitespace tokens in blocks of 16; a prompt's
leading full blocks already seen are hits (vllm:prefix_cache_hits, in tokens, of
vllm:prefix_cache_queries) and skip their prefill time, so a replayed prompt is served
faster, as on a real server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vllm/v1/metrics/loggers.py request_latency_buckets (subset is fine for a double)
LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]


class Families:
    """The metric families of one /metrics registry, labelled per engine (model_name, engine)
    as PrometheusStatLogger does; engines of one server share them."""

    def __init__(self) -> None:
        reg = self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge("vllm:num_requests_running",
                             "Number of requests in model execution batches.", labels,
                             registry=reg)
        self.waiting = Gauge("vllm:num_requests_waiting",
                             "Number of requests waiting to be processed.", labels, registry=reg)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                        labels, registry=reg)
        self.preempt = Counter("vllm:num_preemptions",
                               "Cumulative number of preemption from the engine.", labels,
                               registry=reg)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                              labels, registry=reg)
        self.gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                           labels, registry=reg)
        self.pc_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", labels, registry=reg)
        self.pc_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            labels, registry=reg)

        def hist(name: str, doc: str) -> Any:
            return Histogram(name, doc, labels, buckets=LATENCY_BUCKETS, registry=reg)

        self.ttft = hist("vllm:time_to_first_token_seconds",
                         "Histogram of time to first token in seconds.")
        self.itl = hist("vllm:inter_token_latency_seconds",
                        "Histogram of inter-token latency in seconds.")
        self.e2e = hist("vllm:e2e_request_latency_seconds",
                        "Histogram of e2e request latency in seconds.")
        self.queue = hist("vllm:request_queue_time_seconds",
                          "Histogram of time spent in WAITING phase for request.")
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.")
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.")


class Engine:
    BLOCK = 16

    def __init__(self, model: str, max_num_seqs: int, kv_tokens: int, tpot_s: float,
                 prefill_s_per_token: float, die_after: int | None,
                 prefix_caching: bool = True, jit_at: int | None = None,
                 jit_stall_s: float = 0.0, index: int = 0,
                 families: Families | None = None) -> None:
        self.model = model
        self.prefix_caching = prefix_caching
        self.cached_blocks: set[int] = set()
        self.slots = threading.Semaphore(max_num_seqs)
        self.max_num_seqs = max_num_seqs
        self.kv_tokens = kv_tokens
        self.tpot_s = tpot_s
        self.prefill_s_per_token = prefill_s_per_token
        self.die_after = die_after
        self.jit_at = jit_at  # vLLM's JIT monitor: one compile at this request, once per process
        self.jit_stall_s = jit_stall_s
        self.stall_until = 0.0
        self.lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.kv_used = 0
        self.served = 0
        fam = families or Families()
        self.registry = fam.registry
        lv = (model, str(index))
        self.index = index
        self.g_running = fam.running.labels(*lv)
        self.g_waiting = fam.waiting.labels(*lv)
        self.g_kv = fam.kv.labels(*lv)
        self.c_preempt = fam.preempt.labels(*lv)
        self.c_prompt = fam.prompt.labels(*lv)
        self.c_gen = fam.gen.labels(*lv)
        self.c_pc_queries = fam.pc_queries.labels(*lv)
        self.c_pc_hits = fam.pc_hits.labels(*lv)
        self.h_ttft = fam.ttft.labels(*lv)
        self.h_itl = fam.itl.labels(*lv)
        self.h_e2e = fam.e2e.labels(*lv)
        self.h_queue = fam.queue.labels(*lv)
        self.h_prefill = fam.prefill.labels(*lv)
        self.h_decode = fam.decode.labels(*lv)

    def _update(self, running: int = 0, waiting: int = 0, kv: int = 0) -> None:
        with self.lock:
            self.running += running
            self.waiting += waiting
            self.kv_used += kv
            self.g_running.set(self.running)
            self.g_waiting.set(self.waiting)
            self.g_kv.set(min(1.0, self.kv_used / self.kv_tokens))

    def prefix_lookup(self, tokens: list[str]) -> int:
        """Tokens of `tokens` served from the prefix cache (leading full blocks seen before);
        then caches this prompt's full blocks."""
        if not self.prefix_caching:
            return 0
        hits = 0
        h = 0
        missed = False
        with self.lock:
            for end in range(self.BLOCK, len(tokens) + 1, self.BLOCK):
                h = hash((h, tuple(tokens[end - self.BLOCK:end])))
                if not missed and h in self.cached_blocks:
                    hits = end
                else:
                    missed = True
                self.cached_blocks.add(h)
        hits = min(hits, len(tokens) - 1)  # the last token is always computed
        self.c_pc_queries.inc(len(tokens))
        self.c_pc_hits.inc(max(0, hits))
        return max(0, hits)

    def count_request(self) -> None:
        with self.lock:
            self.served += 1
            n = self.served
        if self.jit_at is not None and n == self.jit_at:
            # vllm/utils/jit_monitor.py _handle_jit_event (0.26.0), logged by the EngineCore
            stamp = time.strftime("%m-%d %H:%M:%S")
            print(f"(EngineCore pid=4243) WARNING {stamp} [jit_monitor.py:135] Triton kernel JIT "
                  "compilation during inference: _topk_topp_kernel. This causes a latency "
                  "spike; consider extending warmup to cover this shape/config.", flush=True)
            self.stall_until = time.perf_counter() + self.jit_stall_s  # the compile stalls steps
        if self.die_after is not None and n > self.die_after:
            print("ERROR [core.py] EngineCore encountered a fatal error.", flush=True)
            print("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                  "See stack trace (above) for the root cause.", flush=True)
            os._exit(1)


class Router:
    """The engines behind one API endpoint. With several (data parallel), each request goes to
    the engine with the lowest waiting * 4 + running, the scan starting one engine further
    each time so ties rotate: vLLM 0.26.0 DPLBAsyncMPClient.get_core_engine_for_request
    (vllm/v1/engine/core_client.py)."""

    def __init__(self, engines: list[Engine]) -> None:
        self.engines = engines
        self.registry = engines[0].registry
        self.model = engines[0].model
        self._start = 0
        self._lock = threading.Lock()

    def pick(self) -> Engine:
        with self._lock:
            n = len(self.engines)
            order = [self.engines[(self._start + i) % n] for i in range(n)]
            self._start = (self._start + 1) % n
            best = min(order, key=lambda e: e.waiting * 4 + e.running)
            best._update(waiting=1)  # counted at once, as vLLM counts it locally
            return best


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-vllm"
    router: Router

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        eng = self.router
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": eng.model, "object": "model",
                                                "owned_by": "vllm", "root": eng.model}]}
            self._send(200, json.dumps(body).encode())
        elif self.path == "/metrics":
            self._send(200, generate_latest(eng.registry), "text/plain; version=0.0.4")
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/v1/completions":
            self._send(404, b'{"detail":"Not Found"}')
            return
        t_arrive = time.perf_counter()
        eng = self.router.pick()  # the request is waiting on that engine from here
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        eng.count_request()
        prompt = req.get("prompt") or ""
        prompt_tokens = max(1, len(str(prompt).split()))
        max_tokens = int(req.get("max_tokens") or 16)
        stream = bool(req.get("stream"))
        usage_wanted = bool((req.get("stream_options") or {}).get("include_usage"))
        eng.slots.acquire()
        try:
            eng._update(waiting=-1, running=1, kv=prompt_tokens + max_tokens)
            t_sched = time.perf_counter()
            eng.h_queue.observe(t_sched - t_arrive)
            cached = eng.prefix_lookup(str(prompt).split())
            time.sleep(0.001 + (prompt_tokens - cached) * eng.prefill_s_per_token)
            eng.c_prompt.inc(prompt_tokens)
            t_first = time.perf_counter()
            eng.h_prefill.observe(t_first - t_sched)
            eng.h_ttft.observe(t_first - t_arrive)
            rid = f"cmpl-{id(self)}-{int(t_arrive * 1e6)}"
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
            texts: list[str] = []
            last = t_first
            for i in range(max_tokens):
                if eng.stall_until > time.perf_counter():
                    time.sleep(eng.stall_until - time.perf_counter())
                if i:
                    with eng.lock:
                        running = eng.running
                    time.sleep(eng.tpot_s * (1.0 + running / 8.0))
                    now = time.perf_counter()
                    eng.h_itl.observe(now - last)
                    last = now
                tok = f" t{i}"
                texts.append(tok)
                eng.c_gen.inc()
                if stream:
                    chunk = {"id": rid, "object": "text_completion", "created": int(time.time()),
                             "model": eng.model,
                             "choices": [{"index": 0, "text": tok, "logprobs": None,
                                          "finish_reason": "length" if i == max_tokens - 1
                                          else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
            t_end = time.perf_counter()
            eng.h_decode.observe(t_end - t_first)
            eng.h_e2e.observe(t_end - t_arrive)
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            if stream:
                if usage_wanted:
                    final = {"id": rid, "object": "text_completion", "created": int(time.time()),
                             "model": eng.model, "choices": [], "usage": usage}
                    self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            else:
                body = {"id": rid, "object": "text_completion", "model": eng.model,
                        "choices": [{"index": 0, "text": "".join(texts),
                                     "finish_reason": "length"}], "usage": usage}
                self._send(200, json.dumps(body).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            eng._update(running=-1, kv=-(prompt_tokens + max_tokens))
            eng.slots.release()


def make_server(host: str, port: int, engine: Engine | list[Engine]) -> ThreadingHTTPServer:
    """Bind now (raises OSError 'Address already in use' like vLLM's sock.bind). A list of
    engines shares one endpoint (data parallel)."""
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit("the test double only listens on 127.0.0.1")
    router = Router(engine if isinstance(engine, list) else [engine])
    handler = type("BoundHandler", (Handler,), {"router": router})
    srv = ThreadingHTTPServer((host, port), handler, bind_and_activate=False)
    srv.daemon_threads = True
    srv.request_queue_size = 1024  # uvicorn backlog is 2048; 5 would add 1 s SYN retries
    srv.allow_reuse_address = True
    srv.server_bind()
    srv.server_activate()
    return srv


if __name__ == "__main__":  # manual use: python double.py PORT
    eng = Engine("fake", 8, 4096, 0.002, 1e-5, None)
    make_server("127.0.0.1", int(sys.argv[1]), eng).serve_forever()

"""A result dict with exactly the keys vLLM 0.26.0 `vllm bench serve --save-result
--save-detailed` writes for a generation benchmark (vllm/benchmarks/serve.py: the
`result` dict of benchmark(), process_one_metric's mean/median/std/pNN keys, and the keys
main() adds)."""

from __future__ import annotations

import numpy as np


def make_result(ttfts_s: list[float], tpot_s: float, output_len: int = 128,
                duration: float = 10.0, goodput_slo: dict[str, float] | None = None,
                percentiles: tuple[int, ...] = (50, 90, 99)) -> dict:
    n = len(ttfts_s)
    itls = [[tpot_s] * (output_len - 1) for _ in range(n)]
    e2el = [t + sum(i) for t, i in zip(ttfts_s, itls, strict=True)]
    tpots = [(e - t) / (output_len - 1) for e, t in zip(e2el, ttfts_s, strict=True)]
    good = None
    if goodput_slo:
        ok = [all(v / 1000 >= x for k, v in goodput_slo.items()
                  for x in ([t] if k == "ttft" else [p] if k == "tpot" else [e]))
              for t, p, e in zip(ttfts_s, tpots, e2el, strict=True)]
        good = sum(ok) / duration
    r: dict = {
        "date": "20261129-101500", "endpoint_type": "vllm", "backend": "vllm", "label": None,
        "model_id": "qwen", "tokenizer_id": "qwen", "num_prompts": n, "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": None, "duration": duration, "completed": n,
        "failed": 0, "total_input_tokens": 512 * n, "total_output_tokens": output_len * n,
        "request_throughput": n / duration, "request_goodput": good,
        "output_throughput": output_len * n / duration,
        "total_token_throughput": (512 + output_len) * n / duration,
        "input_lens": [512] * n, "output_lens": [output_len] * n, "ttfts": ttfts_s,
        "itls": itls, "start_times": [0.0] * n, "generated_texts": [""] * n, "errors": [""] * n,
        "max_output_tokens_per_s": 1.0, "max_concurrent_requests": n, "rtfx": 0.0,
    }
    for name, vals in (("ttft", ttfts_s), ("tpot", tpots), ("itl", [x for i in itls for x in i]),
                       ("e2el", e2el)):
        a = np.array(vals) * 1000
        r[f"mean_{name}_ms"], r[f"median_{name}_ms"], r[f"std_{name}_ms"] = (
            float(a.mean()), float(np.median(a)), float(a.std()))
        for p in percentiles:
            r[f"p{p}_{name}_ms"] = float(np.percentile(a, p))
    return r

#!/usr/bin/env python3
"""Write labs/data/chat_trace.jsonl: the shipped example trace of a chat-like service, in
vLLM's timed_trace format (core.workload). Deterministic: the same parameters write the
same file.

Parameters (the defaults are the shipped file's):
- every prompt starts with one shared system prompt of --system tokens;
- the user turn after it: log-normal, median --user-median tokens, sigma --user-sigma
  (clipped to [8, 4096]);
- the answer: log-normal, median --answer-median tokens, sigma --answer-sigma (clipped to
  [8, 2048]);
- arrivals: gamma inter-arrival times of shape --shape (cv = 1/sqrt(shape): 0.25 gives
  cv 2, bursty; 1 would be Poisson) at a mean of --rate requests/s (the loop rescales it
  with --rate);
- hash ids: 16 tokens each (vLLM's block); ids 0..system/16-1 are the system prompt's.

    python tools/make_chat_trace.py [--out labs/data/chat_trace.jsonl]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from course_utils.core.workload import (  # noqa: E402
    CHUNK,
    TraceRequest,
    distribution,
    trace_text,
)


def make(a: argparse.Namespace) -> list[TraceRequest]:
    rng = random.Random(a.seed)
    system_ids = list(range(math.ceil(a.system / CHUNK)))
    fresh = len(system_ids)
    t = 0.0
    out = []
    for i in range(a.requests):
        if i:
            t += rng.gammavariate(a.shape, 1.0 / (a.rate * a.shape))
        user = min(4096, max(8, round(rng.lognormvariate(math.log(a.user_median), a.user_sigma))))
        answer = min(
            2048, max(8, round(rng.lognormvariate(math.log(a.answer_median), a.answer_sigma)))
        )
        n_in = a.system + user
        own = math.ceil(n_in / CHUNK) - len(system_ids)
        ids = system_ids + list(range(fresh, fresh + own))
        fresh += own
        out.append(TraceRequest(round(t, 3), n_in, answer, tuple(ids)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "labs" / "data" / "chat_trace.jsonl"))
    p.add_argument("--requests", type=int, default=480)
    p.add_argument("--system", type=int, default=1024, help="a multiple of 16")
    p.add_argument("--user-median", type=float, default=160.0)
    p.add_argument("--user-sigma", type=float, default=0.8)
    p.add_argument("--answer-median", type=float, default=200.0)
    p.add_argument("--answer-sigma", type=float, default=0.7)
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--shape", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.system % CHUNK:
        p.error(f"--system must be a multiple of {CHUNK} (whole shared blocks)")
    reqs = make(a)
    Path(a.out).write_text(trace_text(reqs))
    print(f"wrote {a.out} ({Path(a.out).stat().st_size} bytes)")
    print(distribution(reqs).text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

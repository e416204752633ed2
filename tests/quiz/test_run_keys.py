"""Every item that reads a recorded run (labs/results) prints the numbers its key comes from:
each check below re-derives the key from the numbers in the item's own (English) prompt, with
the learner's arithmetic, and tests/quiz/run_checks.py recomputes it from the cited files."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from course_utils import quiz
from course_utils.core import validity
from course_utils.core.records import relative_spread
from tests.quiz.run_checks import RUN_CHECKS

NUM = r"(-?[\d,]+(?:\.\d+)?)"


def _n(text: str) -> float:
    return float(text.replace(",", ""))


def _find(pattern: str, text: str) -> list[float]:
    """The numbers a pattern's groups hold (the pattern must match)."""
    m = re.search(pattern.replace("{N}", NUM), text)
    assert m, (pattern, text)
    return [_n(g) for g in m.groups()]


def _keys(q: quiz.Question) -> set[str]:
    return {c.key for c in q.choices if c.correct}


def _slo(text: str) -> dict[str, float]:
    """``p99 TTFT ≤ 300 ms, p99 TPOT ≤ 50 ms`` -> {ttft: 300, tpot: 50}."""
    return {k.lower(): _n(v) for k, v in re.findall(r"p99 (TTFT|TPOT) ≤ ([\d,]+) ms", text)}


def littles_law(q: quiz.Question, t: str) -> None:
    thr, e2e = _find(r"completed {N} req/s with a mean end-to-end latency of {N} ms", t)
    assert quiz.grade(q, thr * e2e / 1000).correct


def littles_cap(q: quiz.Question, t: str) -> None:
    thr, e2e = _find(r"completed {N} req/s at a mean end-to-end latency of {N} ms", t)
    assert _keys(q) == {c.key for c in q.choices if int(c.key) < thr * e2e / 1000}


def ttft_split(q: quiz.Question, t: str) -> None:
    ttft, queue, prefill = _find(
        r"`vllm:time_to_first_token_seconds` {N} ms, `vllm:request_queue_time_seconds` {N} ms, "
        r"`vllm:request_prefill_time_seconds` {N} ms",
        t,
    )
    parts = {"queue": queue, "prefill": prefill, "outside": ttft - queue - prefill}
    assert _keys(q) == {k for k, v in parts.items() if v > ttft / 2}


def prefix_replay(q: quiz.Question, t: str) -> None:
    rows = re.findall(r"([\d.]+) req/s: p99 TTFT \d+ ms, hits ([\d.]+)%", t)
    bad = [r for r, hit in rows if float(hit) / 100 > validity.REPLAY_HIT_RATE]
    assert bad and len(bad) < len(rows)
    right = next(c for c in q.choices if c.correct)
    assert _keys(q) == {"replay"} and "/".join(bad) in right.text["en"]


def jit_window(q: quiz.Question, t: str) -> None:
    inside = "Between `Starting main benchmark run...` and the end of that benchmark"
    assert inside in t and "JIT compilation during inference" in t and "no warm-up" in t
    assert _keys(q) == {"jit"}


def kv_preempt(q: quiz.Question, t: str) -> None:
    rows = [
        [_n(x) for x in r]
        for r in re.findall(r"Running (\d+), Waiting (\d+), KV ([\d.]+)%", t)
    ]
    first, full = rows[0], next(r for r in rows if r[1] > 0)
    assert "none arrive later" in t and first[1] == 0  # no arrivals, no queue at the start
    assert full[2] >= 95 and full[0] < first[0]  # the queue starts with a full cache
    assert _keys(q) == {"preempt"}


def replicas_plan(q: quiz.Question, t: str) -> None:
    scan = re.findall(r"([\d.]+): (met|missed)", t)
    missed = min((float(r) for r, m in scan if m == "missed"), default=math.inf)
    knee = max(float(r) for r, m in scan if m == "met" and float(r) < missed)
    target, headroom = _find(r"serve {N} req/s with {N}% of each replica", t)
    assert q.answer == math.ceil(target / (knee * (1 - headroom / 100)) - 1e-9)


def loop_ending(q: quiz.Question, t: str) -> None:
    rate = _find(r"tokens at {N} req/s", t)[0]
    got, share = _find(r"scored {N} req/s of request goodput as run, {N}% of the offered", t)
    assert abs(got / rate * 100 - share) <= 0.5
    assert "kept nothing" in t and "no value met the SLO" in t and _keys(q) == {"past_knee"}


def budget_unused(q: quiz.Question, t: str) -> None:
    prompt = _find(r"\({N} in /", t)[0]
    used, budget = _find(r"carried {N} tokens on average against the budget of {N}", t)
    assert used < budget / 2 and prompt <= budget and _keys(q) == {"unused"}


def knee_ranking(q: quiz.Question, t: str) -> None:
    loop = {k: [_n(a), _n(b)] for k, a, b in re.findall(r"(\S+) ([\d.]+), ([\d.]+)[;.]", t)}
    kept = re.search(r"it kept (\S+)\.", t)
    assert kept
    grid = dict(re.findall(r"(defaults|max_num_batched_tokens=\d+) ([\d.]+)(?: and| req/s)", t))
    g = {k: _n(v) for k, v in grid.items()}
    k = kept.group(1)
    # the loop ranked its kept value first, the grid ranked it below the defaults
    assert sum(loop[k]) > sum(loop["defaults"]) and g[k] < g["defaults"]
    spread = max(relative_spread([*loop[x], g[x]]) or 0.0 for x in g)
    assert spread > abs(g["defaults"] - g[k]) / ((g["defaults"] + g[k]) / 2)
    assert "No value met the SLO" in t and _keys(q) == {"ending_only"}


def spread_scale(q: quiz.Question, t: str) -> None:
    best, pick = _find(r"measured \S+ at {N} req/s and \S+ at {N} req/s", t)
    margin = _find(r"moved up to {N}%", t)[0] / 100
    apart = (best - pick) / ((best + pick) / 2)
    assert apart <= margin < best / pick - 1 and _keys(q) == {"tie"}
    assert "two different hosts" in t


def kv_gain(q: quiz.Question, t: str) -> None:
    total, per = _find(r"vLLM sees {N} GiB in all; {N} bytes of KV per token", t)
    base, tokens = _find(r"`gpu_memory_utilization={N}` vLLM logged `GPU KV cache size: {N}", t)
    to = _find(r"Before you run {N}:", t)[0]
    assert quiz.grade(q, tokens + (to - base) * total * 1024**3 / per).correct


def p99_gate(q: quiz.Question, t: str) -> None:
    slo = _slo(t.split("SLO:")[1])
    got = {k.lower(): _n(v) for k, v in re.findall(r"reported .*?p99 (TTFT|TPOT) ([\d.]+)", t)}
    got.update({k.lower(): _n(v) for k, v in re.findall(r"p99 (TTFT|TPOT) ([\d.]+) ms[,.]", t)})
    over = {k for k in slo if got[k] > slo[k]}
    want = "pass" if not over else f"fail-{next(iter(over))}" if len(over) == 1 else "fail-several"
    assert _keys(q) == {want}


def sweep_best(q: quiz.Question, t: str) -> None:
    slo = _slo(t.split("Per value:")[0])
    rows = t.split("Per value: ")[1].split(". Scored")[0].split("; ")
    score: dict[str, float] = {}
    for row in rows:
        value, rest = row.split(": ", 1)
        if "requests within every target" in rest:
            good, dur = _find(r"{N} of \d+ requests within every target in {N} s", rest)
            score[value] = good / dur
        else:
            p99 = {k.lower(): _n(v) for k, v in re.findall(r"p99 (TTFT|TPOT) ([\d.]+)", rest)}
            thr = _find(r"^{N} req/s", rest)[0]
            score[value] = thr if all(p99[k] <= slo[k] for k in slo) else 0.0
    best = max(score.values())
    winners = [v for v, s in score.items() if s == best]
    assert _keys(q) == ({winners[0]} if best > 0 and len(winners) == 1 else {"none"})


def diagnose(q: quiz.Question, t: str) -> None:
    """The two leaves the recorded diagnosis items reach, read off the printed numbers."""
    waiting = _find(r"`vllm:num_requests_waiting` mean {N}", t)[0]
    running, cap = _find(r"`vllm:num_requests_running` max {N} \(max_num_seqs {N}\)", t)
    kv = _find(r"`vllm:kv_cache_usage_perc` max {N}", t)[0]
    slo = _slo(t.split("SLO:")[1])
    p99 = {k.lower(): _n(v) for k, v in re.findall(r"p99 (TTFT|TPOT) ([\d,.]+) ms[,.]", t)}
    if waiting >= 1 and running >= cap and kv < 0.95:  # the cap holds the queue
        want = {"queue"} if q.generator == "diagnose_constraint" else {"max_num_seqs"}
    else:
        assert waiting < 1 and all(p99[k] <= slo[k] for k in slo)  # nothing binds
        want = {"none"}
    assert _keys(q) == want


def same_batch_spread(q: quiz.Question, t: str) -> None:
    a, b = _find(r"before either cache filled, .*? generated {N} vs {N} tok/s", t)
    assert abs(b / a - 1) >= q.params["min_gain"] and _keys(q) == {"spread"}


def kv_binding(q: quiz.Question, t: str) -> None:
    prompt, out, at = _find(
        r"a prompt of at most {N} tokens plus {N} generated \(`ignore_eos`\), at most {N} running",
        t,
    )
    pool = _find(r"logged `GPU KV cache size: {N} tokens`", t)[0]
    demand = at * math.ceil((prompt + out) / 16) * 16
    assert q.answer == demand and ("does not bind" in q.explain["en"]) == (demand < pool)


def kv_tokens(q: quiz.Question, t: str) -> None:
    gib = _find(r"Available KV cache memory: {N} GiB", t)[0]
    assert quiz.grade(q, gib * 1024**3 // 57_344 // 16 * 16).correct  # auto dtype, 16-token blocks


def max_concurrency(q: quiz.Question, t: str) -> None:
    gib, mml = _find(r"{N} GiB of KV cache, `--max-model-len {N}`", t)
    blocks = gib * 1024**3 // 57_344 // 16
    assert quiz.grade(q, blocks / math.ceil(mml / 16)).correct


PROMPT_CHECKS: dict[str, Callable[[quiz.Question, str], None]] = {
    "littles_law": littles_law,
    "littles_cap": littles_cap,
    "ttft_split": ttft_split,
    "prefix_replay": prefix_replay,
    "jit_window": jit_window,
    "kv_preempt": kv_preempt,
    "replicas_plan": replicas_plan,
    "loop_ending": loop_ending,
    "budget_unused": budget_unused,
    "knee_ranking": knee_ranking,
    "spread_scale": spread_scale,
    "kv_gain": kv_gain,
    "p99_gate": p99_gate,
    "sweep_best": sweep_best,
    "diagnose_constraint": diagnose,
    "diagnose_knobs": diagnose,
    "same_batch_spread": same_batch_spread,
    "kv_binding": kv_binding,
    "kv_tokens": kv_tokens,
    "max_concurrency": max_concurrency,
}


def _cites_a_run(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("labs/results")
    if isinstance(value, dict):
        return any(_cites_a_run(v) for v in value.values())
    if isinstance(value, list):
        return any(_cites_a_run(v) for v in value)
    return False


def _run_items() -> list[quiz.Question]:
    out = []
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            if q.generator in RUN_CHECKS or _cites_a_run(q.params):
                out.append(q)
    return out


@pytest.mark.parametrize("q", _run_items(), ids=lambda q: q.id)
def test_the_key_follows_from_the_prompts_numbers(q: quiz.Question) -> None:
    assert q.generator in PROMPT_CHECKS, f"no prompt check for {q.generator}"
    PROMPT_CHECKS[q.generator](q, q.prompt["en"])
    for lg in quiz.LANGS:  # the Chinese prompt prints the same numbers
        nums = set(re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", q.prompt["en"]))
        missing = [x for x in nums if x not in q.prompt[lg]]
        assert not missing, (q.id, lg, missing)


@pytest.mark.parametrize("q", [q for q in _run_items() if q.generator in RUN_CHECKS],
                         ids=lambda q: q.id)
def test_the_key_follows_from_the_cited_files(q: quiz.Question) -> None:
    RUN_CHECKS[str(q.generator)](q, q.params)


def test_every_run_generator_is_checked_both_ways() -> None:
    used = {q.generator for q in _run_items()}
    assert used <= set(PROMPT_CHECKS) and set(RUN_CHECKS) <= used

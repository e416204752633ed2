"""Request logs turned into a trace (core.workload), read from a trace already or from

- **an OpenAI-style JSONL**, one request per line: a ``timestamp`` (Unix seconds or ISO 8601;
  else ``arrival_time`` or ``created``), ``messages`` or ``prompt`` (text or token ids) and
  ``usage`` (``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``),
  each at the top level or under ``request`` / ``response``;
- **`vllm bench serve --save-detailed`'s result JSON** (vllm/benchmarks/serve.py, 0.26.0):
  ``input_lens``, ``output_lens``, ``start_times``, ``errors``; no prompts.

Nothing is guessed: a request without its arrival, its lengths or (when other lines have one)
its prompt is a problem line, and so is a failed one unless ``drop_failed``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from course_utils.core.workload import (
    CHUNK,
    TraceError,
    TraceRequest,
    finite_number,
    json_lines,
    parse_trace,
    prefix_hash_ids,
    problem,
    token_count,
)

TIME_KEYS = ("timestamp", "arrival_time", "created")
IN_KEYS = ("prompt_tokens", "input_tokens")
OUT_KEYS = ("completion_tokens", "output_tokens")
TIME_FIX = "log when each request arrived (Unix seconds or ISO 8601)"
USAGE_FIX = "log the response's usage (streams: stream_options include_usage)"
BENCH_FIX = "use the file vllm bench serve wrote, unedited"


@dataclass(frozen=True)
class LoggedRequest:
    where: str
    timestamp: float
    input_length: int
    output_length: int
    prompt: str | tuple[int, ...] | None


# the requests read, the problems found, the failed requests dropped
Read = tuple[list[LoggedRequest], list[str], int]


@dataclass
class ReadLog:
    """A log read: the trace's requests (time order, from 0) and notes on what was done."""

    requests: list[TraceRequest]
    fmt: str
    prefixes_known: bool
    notes: list[str] = field(default_factory=list)


def _scopes(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [d] + [d[k] for k in ("request", "response") if isinstance(d.get(k), dict)]


def _first(d: dict[str, Any], keys: Sequence[str]) -> Any:
    """The first of ``keys`` in a line's scopes, each before its ``usage``."""
    places = [p for s in _scopes(d) for p in (s, s.get("usage")) if isinstance(p, dict)]
    return next((p[k] for p in places for k in keys if k in p), None)


def _time(v: Any) -> float | None:
    if not isinstance(v, str):
        return finite_number(v)
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # content parts: {"type": "text", "text": ...}
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    return "" if c is None else json.dumps(c, sort_keys=True)


def _prompt(d: dict[str, Any]) -> str | tuple[int, ...] | None:
    """The prompt as the model saw it: token ids, or the text (messages rendered role by
    role, so equal leading messages give equal leading text)."""
    for scope in _scopes(d):
        msgs = scope.get("messages")
        if isinstance(msgs, list) and msgs:
            return "".join(
                f"<{m.get('role', '')}>{_content(m.get('content'))}\n"
                for m in msgs
                if isinstance(m, dict)
            )
        p = scope.get("prompt")
        if isinstance(p, str) and p:
            return p
        if isinstance(p, list) and p and all(isinstance(t, int) for t in p):
            return tuple(p)
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            return p[0]
    return None


def _openai_line(where: str, d: Any, drop_failed: bool) -> LoggedRequest | list[str]:
    """The request of one log line, or its problems ([]: a failed request dropped)."""
    if not isinstance(d, dict):
        return [problem(where, "not a JSON object", "one request object per line")]
    failed = any(scope.get("error") for scope in _scopes(d))
    ts = _time(_first(d, TIME_KEYS))
    n_in, n_out = token_count(_first(d, IN_KEYS)), token_count(_first(d, OUT_KEYS))
    if failed or n_out == 0:
        why = "the request failed" if failed else "completion_tokens is 0"
        fix = "delete the line or pass --drop-failed"
        return [] if drop_failed else [problem(where, f"{why}: its answer length is unknown", fix)]
    if ts is None or not n_in or not n_out:
        missing = (
            (ts is None, "no timestamp (timestamp, arrival_time or created)", TIME_FIX),
            (not n_in, "no prompt token count (usage.prompt_tokens)", USAGE_FIX),
            (not n_out, "no answer token count (usage.completion_tokens)", USAGE_FIX),
        )
        return [problem(where, what, fix) for bad, what, fix in missing if bad]
    return LoggedRequest(where, ts, n_in, n_out, _prompt(d))


def _read_openai(text: str, name: str, drop_failed: bool) -> Read:
    reqs: list[LoggedRequest] = []
    probs: list[str] = []
    dropped = 0
    for where, d in json_lines(text, name, probs, "delete or complete the line"):
        r = _openai_line(where, d, drop_failed)
        if isinstance(r, LoggedRequest):
            reqs.append(r)
        else:
            probs += r
            dropped += not r
    if any(r.prompt is not None for r in reqs):
        fix = "log every request's prompt, or none"
        what = "no prompt (messages or prompt) while other lines have one"
        probs += [problem(r.where, what, fix) for r in reqs if r.prompt is None]
    return reqs, probs, dropped


def _read_bench(d: dict[str, Any], name: str, drop_failed: bool) -> Read:
    ins, outs, starts = (d.get(k) for k in ("input_lens", "output_lens", "start_times"))
    if not isinstance(ins, list) or not isinstance(outs, list) or not isinstance(starts, list):
        what = "no per-request lists (input_lens, output_lens, start_times)"
        raise TraceError([problem(name, what, "run vllm bench serve with --save-detailed")])
    errors = d.get("errors") or [""] * len(ins)
    if not len(ins) == len(outs) == len(starts) == len(errors):
        raise TraceError([problem(name, "per-request lists of different lengths", BENCH_FIX)])
    reqs, probs, dropped = [], [], 0
    for i, (n_in, n_out, st, err) in enumerate(zip(ins, outs, starts, errors, strict=True)):
        where, ts = f"{name}: request {i}", _time(st)
        if (err or not n_out) and drop_failed:
            dropped += 1
        elif err or not n_out:
            fix = "pass --drop-failed, or re-run the bench"
            probs.append(problem(where, "failed in the run: its answer length is unknown", fix))
        elif ts is None or not token_count(n_in) or not token_count(n_out):
            probs.append(problem(where, "bad start time or token count", BENCH_FIX))
        else:
            reqs.append(LoggedRequest(where, ts, n_in, n_out, None))
    return reqs, probs, dropped


def _is_trace(text: str) -> bool:
    """A file in vLLM's timed_trace format already (its first line has the lengths)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    try:
        d = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(d, dict) and "input_length" in d and "output_length" in d


def _bench_json(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(d, dict) and ("input_lens" in d or "request_throughput" in d):
        return d
    return None


def read_log(text: str, name: str, *, chunk: int = CHUNK, drop_failed: bool = False) -> ReadLog:
    """The trace of a log's text (either format, or a trace already); raises TraceError, one
    line per problem."""
    if _is_trace(text):
        return ReadLog(parse_trace(text, name, chunk), "vLLM timed_trace", True)
    bench = _bench_json(text)
    if bench is not None:
        fmt = "vllm bench serve --save-detailed"
        reqs, probs, dropped = _read_bench(bench, name, drop_failed)
    else:
        fmt = "OpenAI-style JSONL"
        reqs, probs, dropped = _read_openai(text, name, drop_failed)
    if not reqs and not probs:
        probs.append(problem(name, "no request in the log", "give a log with one request per line"))
    if probs:
        raise TraceError(probs)
    notes = []
    if dropped:
        notes.append(f"dropped {dropped} failed request(s) (--drop-failed)")
    late = sum(1 for a, b in zip(reqs, reqs[1:], strict=False) if b.timestamp < a.timestamp)
    if late:
        notes.append(f"{late} line(s) earlier than the line before: sorted by timestamp")
    reqs = sorted(reqs, key=lambda r: r.timestamp)
    if len(reqs) > 2 and all(float(r.timestamp).is_integer() for r in reqs):
        notes.append("every timestamp is a whole second: gaps under a second are not resolved")
    known = any(r.prompt is not None for r in reqs)
    if not known:
        notes.append("the log has no prompts: shared prefixes unknown, the trace shares none")
    elif any(isinstance(r.prompt, str) for r in reqs):
        notes.append(
            "shared prefixes from the prompt text: tokens estimated per request from its "
            "characters per token"
        )
    ids = prefix_hash_ids([r.prompt for r in reqs], [r.input_length for r in reqs], chunk)
    t0 = reqs[0].timestamp
    trace = [
        TraceRequest(r.timestamp - t0, r.input_length, r.output_length, h)
        for r, h in zip(reqs, ids, strict=True)
    ]
    return ReadLog(trace, fmt, known, notes)

"""A request trace that `vllm bench serve --dataset-name timed_trace` (0.26.0) replays, its
statistics, and ``TraceWorkload``: a slice of it as a workload of the tuning loop.

The format (vllm/benchmarks/datasets/datasets.py ``TimedTrace``): one JSON object per line,
``timestamp`` (s), ``input_length``, ``output_length``, ``hash_ids``. In the 0.26.0 source:
- each hash id becomes ``--timed-trace-chunk-hash-size`` (default 16) prompt tokens seeded by
  ``hash(f"{id}:{size}")``: equal ids give equal tokens within one bench process, so ids
  shared by two requests are a shared prompt prefix (``TraceWorkload`` salts the ids with its
  seed so that no two windows share tokens); ``ceil(input_length / chunk)`` ids make the prompt;
- requests are sent in file order at ``timestamp * --timed-trace-sec-multiplier`` s after the
  start (``--request-rate`` and ``--burstiness`` unused), ``--num-prompts`` takes the first;
- ``ignore_eos`` is forced, so each answer is ``output_length`` tokens long.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from course_utils.core.records import Workload

# vLLM's default `--timed-trace-chunk-hash-size`, equal to vLLM's KV block size (16 tokens):
# one hash id per prefix-cache block
CHUNK = 16


def problem(where: str, what: str, fix: str) -> str:
    """One problem of a bad input file, as one line: ``<where>: <what> → fix: <fix>``."""
    return f"{where}: {what} → fix: {fix}"


class TraceError(ValueError):
    """A bad log or trace: one ``problem()`` line per problem found."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives (s), its lengths (tokens), its prompt blocks."""

    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[Any, ...] = ()


def trace_text(requests: Sequence[TraceRequest]) -> str:
    """The trace file's text, one request per line in the given order."""
    rows = ({**asdict(r), "timestamp": round(r.timestamp, 6)} for r in requests)
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)


def finite_number(v: Any) -> float | None:
    """A JSON number as a float; None for anything else (bool, NaN, inf, text)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def token_count(v: Any) -> int | None:
    """A JSON integer >= 0; None for anything else."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def json_lines(text: str, name: str, problems: list[str], fix: str) -> Iterator[tuple[str, Any]]:
    """(where, value) of each non-blank line of a JSONL text; a line that is not JSON adds one
    problem (``fix`` says how to mend it) and is skipped."""
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            problems.append(problem(f"{name}:{no}", "not a JSON object (a torn line?)", fix))
            continue
        yield f"{name}:{no}", value


def _trace_line(d: Any, chunk: int, last: float) -> tuple[str, str] | TraceRequest:
    """The request of one trace line, or (what is wrong, fix)."""
    if not isinstance(d, dict):
        return "not a JSON object", "one request object per line"
    bad = [k for k in ("input_length", "output_length") if not token_count(d.get(k))]
    ts = finite_number(d.get("timestamp"))
    if ts is None:
        bad.append("timestamp")
    ids = d.get("hash_ids", [])
    if not isinstance(ids, list):
        bad.append("hash_ids")
    if bad or ts is None:
        fix = "timestamp: seconds; input_length, output_length: integers >= 1; hash_ids: a list"
        return f"missing or bad {', '.join(bad)}", fix
    need = math.ceil(d["input_length"] / chunk)
    if len(ids) < need:
        return (
            f"{len(ids)} hash_ids cover {len(ids) * chunk} tokens, input_length is "
            f"{d['input_length']} (vLLM would send a shorter prompt)",
            f"give ceil(input_length / {chunk}) = {need} ids",
        )
    if ts < last:
        return "timestamp earlier than the line before", "sort by timestamp"
    return TraceRequest(ts, d["input_length"], d["output_length"], tuple(ids))


def parse_trace(text: str, name: str, chunk: int = CHUNK) -> list[TraceRequest]:
    """The requests of a trace file's text; raises TraceError with one line per problem
    (a torn line, a missing or bad field, too few hash ids, timestamps out of order)."""
    out: list[TraceRequest] = []
    problems: list[str] = []
    for where, d in json_lines(text, name, problems, "delete the line"):
        r = _trace_line(d, chunk, out[-1].timestamp if out else -math.inf)
        if isinstance(r, TraceRequest):
            out.append(r)
        else:
            problems.append(problem(where, *r))
    if not out and not problems:
        problems.append(problem(name, "no request in the file", "give one request per line"))
    if problems:
        raise TraceError(problems)
    return out


def _common_len(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def prefix_hash_ids(
    prompts: Sequence[str | tuple[int, ...] | None],
    input_lengths: Sequence[int],
    chunk: int = CHUNK,
) -> list[tuple[int, ...]]:
    """Hash ids per request such that a request shares its first k ids with an earlier one
    when their prompts agree on their first k full blocks. A prompt is its token ids (exact)
    or its text: then the common characters are turned into tokens at the request's own
    characters per token (usage gives the token count only). None: no prompt, no sharing."""
    keys: dict[type, tuple[list[Any], list[int]]] = {}
    ids: list[tuple[int, ...]] = []
    fresh = 0
    for i, (p, n) in enumerate(zip(prompts, input_lengths, strict=True)):
        blocks = math.ceil(n / chunk)
        shared: tuple[int, ...] = ()
        if p:
            seqs, owners = keys.setdefault(type(p), ([], []))
            pos = bisect.bisect_left(seqs, p)
            best, owner = 0, -1
            for j in (pos - 1, pos):  # the longest common prefix is with a sorted neighbour
                if 0 <= j < len(seqs):
                    c = _common_len(p, seqs[j])
                    if c > best:
                        best, owner = c, owners[j]
            if owner >= 0:
                tokens = best if isinstance(p, tuple) else math.floor(best * n / len(p))
                shared = ids[owner][: min(tokens // chunk, blocks)]
            seqs.insert(pos, p)
            owners.insert(pos, i)
        own = tuple(range(fresh, fresh + blocks - len(shared)))
        fresh += len(own)
        ids.append(shared + own)
    return ids


def expected_hits(requests: Sequence[TraceRequest], chunk: int = CHUNK) -> tuple[int, int]:
    """(hit tokens, prompt tokens) the prefix cache serves when the requests are sent in
    order, each after the earlier ones were computed and nothing evicted (an upper bound).
    As vLLM's prefix cache counts them: whole blocks whose id chain (every block before
    included) was seen, at most ``input_length - 1`` tokens (the last token is computed)."""
    seen: set[int] = set()
    hits = queries = 0
    for r in requests:
        full = r.input_length // chunk
        node, hit_blocks, missed = 0, 0, False
        for k, h in enumerate(r.hash_ids[:full]):
            node = hash((node, h))
            if not missed and node in seen and k < (r.input_length - 1) // chunk:
                hit_blocks += 1
            else:
                missed = True
            seen.add(node)
        hits += hit_blocks * chunk
        queries += r.input_length
    return hits, queries


def _quantile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Distribution:
    """What a trace asks of a server. ``cv``: coefficient of variation of the inter-arrival
    times (1 for Poisson arrivals, > 1 bursty); ``gamma_shape`` = 1 / cv**2, the
    `--burstiness` of vLLM's gamma arrivals with the same variation."""

    requests: int
    span_s: float
    rate: float | None
    cv: float | None
    gamma_shape: float | None
    input_len: dict[str, float]
    output_len: dict[str, float]
    prefix_share: float | None

    def text(self) -> str:
        def row(name: str, d: dict[str, float]) -> str:
            p = "  ".join(f"{k} {d[k]:>7.0f}" for k in ("p50", "p90", "p99"))
            return f"{name:<14} mean {d['mean']:>8.1f}  {p}"

        rate = "n/a (one request)" if self.rate is None else f"{self.rate:.3f} req/s"
        burst = "n/a (fewer than 3 requests)"
        if self.cv is not None and self.gamma_shape is not None:
            kind = "Poisson-like"
            if self.cv > 1.05:
                kind = "bursty"
            elif self.cv < 0.95:
                kind = "smoother than Poisson"
            burst = f"cv {self.cv:.2f} ({kind}; vLLM --burstiness {self.gamma_shape:.2f})"
        share = (
            "unknown (the log has no prompts; the trace shares none)"
            if self.prefix_share is None
            else f"{self.prefix_share:.1%} of prompt tokens (blocks seen earlier in the trace)"
        )
        return "\n".join(
            [
                f"requests       {self.requests} over {self.span_s:.1f} s",
                row("input tokens", self.input_len),
                row("output tokens", self.output_len),
                f"arrival rate   {rate}",
                f"burstiness     {burst}",
                f"shared prefix  {share}",
            ]
        )


def _lengths(xs: Sequence[int]) -> dict[str, float]:
    quantiles = {f"p{q}": _quantile(xs, q / 100) for q in (50, 90, 99)}
    return {"mean": sum(xs) / len(xs), **quantiles}


def _rate(requests: Sequence[TraceRequest], time_scale: float = 1.0) -> float:
    """The mean arrival rate (inf: all at once)."""
    span = (requests[-1].timestamp - requests[0].timestamp) * time_scale
    return (len(requests) - 1) / span if span > 0 else math.inf


def distribution(
    requests: Sequence[TraceRequest], *, chunk: int = CHUNK, prefixes_known: bool = True
) -> Distribution:
    """The distribution of a (time-ordered, non-empty) trace."""
    ts = [r.timestamp for r in requests]
    span = ts[-1] - ts[0]
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    rate = _rate(requests) if span > 0 else None
    cv = shape = None
    if len(gaps) >= 2:
        mean = sum(gaps) / len(gaps)
        var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
        cv = math.sqrt(var) / mean if mean > 0 else None
        shape = 1.0 / cv**2 if cv else None
    hits, queries = expected_hits(requests, chunk)
    return Distribution(
        requests=len(requests),
        span_s=span,
        rate=rate,
        cv=cv,
        gamma_shape=shape,
        input_len=_lengths([r.input_length for r in requests]),
        output_len=_lengths([r.output_length for r in requests]),
        prefix_share=(hits / queries if queries else 0.0) if prefixes_known else None,
    )


def _read_trace(path: str | Path, chunk: int, sha256: str = "") -> tuple[str, list[TraceRequest]]:
    """(the file's short sha256, its requests); ValueError when ``sha256`` is given and differs."""
    data = Path(path).read_bytes()
    sha = hashlib.sha256(data).hexdigest()[:16]
    if sha256 and sha != sha256:
        raise ValueError(
            f"{path} changed since the workload was made from it "
            "→ fix: make the workload again (TraceWorkload.load)"
        )
    return sha, parse_trace(data.decode("utf-8", errors="replace"), str(path), chunk)


@dataclass(frozen=True)
class TraceWorkload(Workload):
    """``num_prompts`` requests of a trace file from request ``start`` on, replayed with
    vLLM's timed_trace dataset, the trace's mean rate scaled to ``request_rate`` (inf: all at
    once). ``input_len``/``output_len``: the slice's mean lengths (rounded);
    ``expected_hit_rate``: its prefix-cache hit rate from its own shared prefixes. Make one
    with ``TraceWorkload.load``."""

    trace: str = ""
    sha256: str = ""
    start: int = 0
    chunk_size: int = CHUNK
    trace_rate: float = 0.0
    expected_hit_rate: float = 0.0
    ignore_eos: bool = True

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        num_prompts: int | None = None,
        request_rate: float | None = None,
        start: int = 0,
        seed: int = 0,
        max_concurrency: int | None = None,
        chunk_size: int = CHUNK,
    ) -> TraceWorkload:
        """A slice of the trace at ``path`` (default: all of it, at its recorded rate).
        Raises TraceError for a bad trace file, ValueError for a bad slice."""
        sha, reqs = _read_trace(path, chunk_size)
        rate = _rate(reqs)
        n = len(reqs) if num_prompts is None else num_prompts
        if n < 1 or start < 0:
            raise ValueError("a trace slice needs num_prompts >= 1 and start >= 0")
        return cls(
            num_prompts=n,
            request_rate=rate if request_rate is None else float(request_rate),
            seed=seed,
            max_concurrency=max_concurrency,
            trace=str(path),
            sha256=sha,
            start=start,
            chunk_size=chunk_size,
            trace_rate=rate,
        )

    def __post_init__(self) -> None:
        """The slice's mean lengths and expected hit rate, from the trace when it is here
        unchanged (so ``dataclasses.replace`` of any field stays consistent); else (a
        recorded workload read back elsewhere) as recorded."""
        try:
            part = self.requests() if self.trace else None
        except (OSError, ValueError):
            part = None
        if part:
            n = len(part)
            hits, queries = expected_hits(part, self.chunk_size)
            for k, v in (
                ("input_len", max(1, round(sum(r.input_length for r in part) / n))),
                ("output_len", max(1, round(sum(r.output_length for r in part) / n))),
                ("expected_hit_rate", round(hits / queries, 4) if queries else 0.0),
            ):
                object.__setattr__(self, k, v)
        super().__post_init__()

    @cached_property
    def _all(self) -> list[TraceRequest]:
        return _read_trace(self.trace, self.chunk_size, self.sha256)[1]

    def requests(self) -> list[TraceRequest]:
        """This slice's requests, timestamps in the trace's own seconds from 0. Past its end
        the trace wraps round, a lap (its span and one mean gap) later; hash ids are salted by
        the random seed and the lap: another random seed sends other tokens with the same
        lengths, arrivals and shared prefixes."""
        reqs, out = self._all, []
        span = reqs[-1].timestamp - reqs[0].timestamp
        lap_s = span + (span / (len(reqs) - 1) if len(reqs) > 1 else 1.0)
        for k in range(self.start, self.start + self.num_prompts):
            lap, i = divmod(k, len(reqs))
            ids = tuple(f"{self.seed}.{lap}.{h}" for h in reqs[i].hash_ids)
            out.append(replace(reqs[i], timestamp=reqs[i].timestamp + lap * lap_s, hash_ids=ids))
        return [replace(r, timestamp=r.timestamp - out[0].timestamp) for r in out]

    def time_scale(self) -> float:
        """`--timed-trace-sec-multiplier`: trace seconds to replay seconds."""
        if math.isinf(self.request_rate) or math.isinf(self.trace_rate):
            return 0.0
        return self.trace_rate / self.request_rate

    def scheduled_rate(self) -> float:
        """The mean arrival rate this slice is sent at (inf: all at once)."""
        return _rate(self.requests(), self.time_scale())

    def warmup(self, num_prompts: int, seed: int) -> TraceWorkload:
        """The warm-up: this slice's arrivals and lengths (at least ``num_prompts`` requests
        of it, so the engine runs the load's bursts), its prompts salted by ``seed``."""
        return replace(self, num_prompts=max(num_prompts, self.num_prompts), seed=seed)

    def sent_requests(self, token_ratio: float = 1.0) -> list[TraceRequest]:
        """The slice as written for vLLM's timed_trace, which samples random token ids per
        hash id, decodes them and lets the server tokenize the text again: ``token_ratio``
        server tokens per sampled token. Each request keeps its blocks (the same hash ids,
        so the same shared prefixes), ``replay_chunk`` tokens sampled per block and its last
        block scaled, so the server counts about the trace's lengths."""
        if not token_ratio > 0:
            raise ValueError(f"token_ratio must be > 0, got {token_ratio!r}")
        c, c2 = self.chunk_size, self.replay_chunk(token_ratio)
        out = []
        for r in self.requests():
            n = math.ceil(r.input_length / c)  # the blocks vLLM expands
            last = r.input_length - (n - 1) * c
            length = (n - 1) * c2 + min(c2, max(1, round(last / token_ratio)))
            out.append(replace(r, input_length=length))
        return out

    def replay_chunk(self, token_ratio: float = 1.0) -> int:
        """Tokens timed_trace samples per hash id (``sent_requests``)."""
        return max(1, round(self.chunk_size / token_ratio))

    def dataset_args(self, slice_path: str | Path, token_ratio: float = 1.0) -> list[str]:
        """`vllm bench serve` dataset flags that replay this slice, written to ``slice_path``
        (``sent_requests(token_ratio)``)."""
        flags = {
            "--dataset-name": "timed_trace",
            "--dataset-path": str(slice_path),
            "--timed-trace-chunk-hash-size": str(self.replay_chunk(token_ratio)),
            "--timed-trace-sec-multiplier": f"{self.time_scale():.6g}",
        }
        return [x for flag in flags.items() for x in flag]


def workload_from_dict(d: Mapping[str, Any]) -> Workload:
    """A recorded workload (``to_dict()``): a trace's (it has ``trace``) or a random one."""
    return TraceWorkload.from_dict(d) if "trace" in d else Workload.from_dict(d)


def expected_prefix_hit_rate(w: Workload) -> float | None:
    """The prefix-cache hit rate a workload's own prompts give: a trace's from its shared
    prefixes, 0 for random prompts without a shared prefix, None (not judged) with one."""
    if isinstance(w, TraceWorkload):
        return w.expected_hit_rate
    return 0.0 if w.prefix_len == 0 else None


def scheduled_rate(w: Workload) -> float:
    """The mean arrival rate the client is asked to produce for this workload."""
    return w.scheduled_rate() if isinstance(w, TraceWorkload) else w.request_rate

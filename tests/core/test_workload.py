"""`python -m course_utils workload`: request logs in, vLLM's timed_trace out; the trace's
distribution; TraceWorkload slices; the validity gate on a trace's own shared prefixes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from course_utils.__main__ import main
from course_utils.core.records import Workload
from course_utils.core.validity import prefix_cache_issue, validity_issues
from course_utils.core.workload import (
    TraceError,
    TraceRequest,
    TraceWorkload,
    expected_hits,
    parse_trace,
    prefix_hash_ids,
    workload_from_dict,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "labs" / "data" / "chat_trace.jsonl"

# a log with known statistics: 101 requests, gaps alternating 0.25 / 0.75 s (rate 2/s),
# a 64-token shared prefix (token ids), prompts 65..165 tokens, answers 10..1010
N = 101
SHARED = [7] * 64


def _known_log(path: Path) -> Path:
    t, lines = 1_700_000_000.0, []
    for i in range(N):
        if i:
            t += 0.25 if i % 2 else 0.75
        prompt = SHARED + [1000 + i] * (i + 1)
        lines.append(
            {
                "timestamp": t,
                "request": {"model": "m", "prompt": prompt},
                "response": {"usage": {"prompt_tokens": len(prompt), "completion_tokens": 10 * (i + 1)}},
            }
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["workload", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_printed_distribution_is_the_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _known_log(tmp_path / "log.jsonl")
    rc, out, err = _run([str(log), "--format", "json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["format"] == "OpenAI-style JSONL" and d["requests"] == N
    assert d["span_s"] == pytest.approx(50.0) and d["rate"] == pytest.approx(2.0)
    # 100 gaps, half 0.25 and half 0.75 s: sample sd = 0.25 * sqrt(100 / 99), mean 0.5
    cv = 0.25 * math.sqrt(100 / 99) / 0.5
    assert d["cv"] == pytest.approx(cv) and d["gamma_shape"] == pytest.approx(1 / cv**2)
    assert d["input_len"] == pytest.approx({"mean": 115.0, "p50": 115.0, "p90": 155.0, "p99": 164.0})
    assert d["output_len"] == pytest.approx({"mean": 510.0, "p50": 510.0, "p90": 910.0, "p99": 1000.0})
    # every request after the first finds the 4 shared blocks: 100 * 64 of 101 * 115 tokens
    assert d["prefix_share"] == pytest.approx(6400 / (N * 115))
    rc, out, _ = _run([str(log)], capsys)
    assert "p50     115  p90     155  p99     164" in out
    assert "2.000 req/s" in out and f"cv {cv:.2f}" in out and "55.1% of prompt tokens" in out


def test_the_trace_is_what_vllm_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _known_log(tmp_path / "log.jsonl")
    rc, out, err = _run([str(log), "--out", str(tmp_path / "t.jsonl")], capsys)
    assert rc == 0, err
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert set(rows[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}
    assert rows[0]["timestamp"] == 0.0 and rows[-1]["timestamp"] == pytest.approx(50.0)
    assert [r["input_length"] for r in rows] == [65 + i for i in range(N)]
    for r in rows:  # vLLM's TimedTrace: ceil(input/16) ids make the whole prompt
        assert len(r["hash_ids"]) == math.ceil(r["input_length"] / 16)
        assert r["hash_ids"][:4] == rows[0]["hash_ids"][:4]
    assert len({h for r in rows for h in r["hash_ids"][4:]}) == sum(len(r["hash_ids"]) - 4 for r in rows)
    # the written trace reads back with the same distribution
    rc, again, _ = _run([str(tmp_path / "t.jsonl")], capsys)
    assert rc == 0 and "vLLM timed_trace" in again and "55.1% of prompt tokens" in again
    # a trace is never overwritten
    before = (tmp_path / "t.jsonl").read_bytes()
    rc, _, err = _run([str(log), "--out", str(tmp_path / "t.jsonl")], capsys)
    assert rc == 2 and err.startswith(f"error: {tmp_path / 't.jsonl'}: exists")
    assert (tmp_path / "t.jsonl").read_bytes() == before


def _write(path: Path, rows: list[object | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _req(t: float, n_in: int = 40, n_out: int = 8, **extra: object) -> dict:
    return {"timestamp": t, "prompt": f"p{t}", "usage": {"prompt_tokens": n_in, "completion_tokens": n_out}, **extra}


def test_bad_logs_get_one_line_per_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_usage = {"timestamp": 2.0, "prompt": "x"}
    no_time = {"prompt": "y", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    log = _write(tmp_path / "bad.jsonl", [_req(1.0), no_usage, no_time, '{"timestamp": 4.0, "pro'])
    out = tmp_path / "t.jsonl"
    rc, stdout, err = _run([str(log), "--out", str(out)], capsys)
    assert rc == 2 and stdout == "" and not out.exists()
    lines = err.splitlines()
    f = str(log)
    # every problem shown: the others as "✗" lines, the last as the one error line
    assert all(x.startswith("  ✗ ") for x in lines[:-1]) and lines[-1].startswith("error: ")
    lines = ["error: " + x.removeprefix("  ✗ ").removeprefix("error: ").replace(
        " (and 3 more above)", "") for x in lines]
    assert lines == [
        f"error: {f}:2: no prompt token count (usage.prompt_tokens) → fix: log the response's "
        "usage (streams: stream_options include_usage)",
        f"error: {f}:2: no answer token count (usage.completion_tokens) → fix: log the "
        "response's usage (streams: stream_options include_usage)",
        f"error: {f}:3: no timestamp (timestamp, arrival_time or created) → fix: log when each "
        "request arrived (Unix seconds or ISO 8601)",
        f"error: {f}:4: not a JSON object (a torn line?) → fix: delete or complete the line",
    ]


def test_an_empty_log_and_a_missing_prompt_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = _write(tmp_path / "empty.jsonl", ["", "  "])
    rc, _, err = _run([str(empty)], capsys)
    assert rc == 2
    assert err == f"error: {empty}: no request in the log → fix: give a log with one request per line\n"
    no_prompt = _req(2.0)
    del no_prompt["prompt"]
    mixed = _write(tmp_path / "mixed.jsonl", [_req(1.0), no_prompt])
    rc, _, err = _run([str(mixed)], capsys)
    assert rc == 2 and err.startswith(f"error: {mixed}:2: no prompt (messages or prompt) while other lines")


def test_failed_requests_are_refused_unless_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path / "f.jsonl", [_req(1.0), _req(2.0, error="timeout"), _req(3.0, n_out=0), _req(4.0)])
    rc, _, err = _run([str(log)], capsys)
    assert rc == 2 and len(err.splitlines()) == 2
    assert err.splitlines()[0].startswith(f"  ✗ {log}:2: the request failed: its answer length is unknown")
    assert err.splitlines()[1].startswith(f"error: {log}:3: completion_tokens is 0")
    assert "(and 1 more above) → fix:" in err.splitlines()[1]
    rc, out, _ = _run([str(log), "--drop-failed"], capsys)
    assert rc == 0 and "note: dropped 2 failed request(s)" in out and "requests       2 over 3.0 s" in out


def test_an_unsorted_log_is_sorted_and_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path / "u.jsonl", [_req(10.0, n_in=11), _req(12.5, n_in=12), _req(11.0, n_in=13), _req(14.0, n_in=14)])
    out = tmp_path / "t.jsonl"
    rc, stdout, err = _run([str(log), "--out", str(out)], capsys)
    assert rc == 0, err
    assert "note: 1 line(s) earlier than the line before: sorted by timestamp" in stdout
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0.0, 1.0, 2.5, 4.0]
    assert [r["input_length"] for r in rows] == [11, 13, 12, 14]


def test_chat_messages_share_their_system_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    system = {"role": "system", "content": "You are a careful assistant. " * 40}

    other = {"role": "system", "content": "You are a terse assistant. " * 44}

    def chat(t: float, user: str, with_system: bool = True) -> dict:
        msgs = [system if with_system else other, {"role": "user", "content": user}]
        return {"timestamp": t, "request": {"messages": msgs}, "response": {"usage": {"prompt_tokens": 300, "completion_tokens": 5}}}

    log = _write(tmp_path / "c.jsonl", [chat(0, "hi"), chat(1, "what is KV?"), chat(2, "hello", False)])
    rc, out, err = _run([str(log), "--out", str(tmp_path / "t.jsonl"), "--format", "json"], capsys)
    assert rc == 0, err
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    # 1200 system characters of ~1215: ~296 of 300 tokens, 18 whole blocks shared
    assert rows[1]["hash_ids"][:18] == rows[0]["hash_ids"][:18]
    assert rows[1]["hash_ids"][18] != rows[0]["hash_ids"][18]
    # another system prompt: its first words are shared, not one whole block
    assert not set(rows[2]["hash_ids"]) & set(rows[0]["hash_ids"])
    d = json.loads(out)
    assert d["prefix_share"] == pytest.approx(18 * 16 / 900)
    assert any("characters per token" in n for n in d["notes"])


def test_a_vllm_bench_detailed_result_is_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = {"num_prompts": 4, "request_throughput": 1.0, "input_lens": [100, 200, 300, 400],
           "output_lens": [10, 20, 30, 40], "start_times": [5000.0, 5000.5, 5001.5, 5003.0],
           "errors": ["", "", "", ""]}
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(res))
    rc, out, err = _run([str(f), "--out", str(tmp_path / "t.jsonl")], capsys)
    assert rc == 0, err
    assert "vllm bench serve --save-detailed" in out
    assert "shared prefix  unknown (the log has no prompts; the trace shares none)" in out
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0.0, 0.5, 1.5, 3.0]
    assert [r["output_length"] for r in rows] == [10, 20, 30, 40]
    res["errors"][2] = "Timeout"
    res["output_lens"][2] = 0
    f.write_text(json.dumps(res))
    rc, _, err = _run([str(f)], capsys)
    assert rc == 2 and err == (
        f"error: {f}: request 2: failed in the run: its answer length is unknown → fix: pass "
        "--drop-failed, or re-run the bench\n")
    summary = {k: v for k, v in res.items() if not k.endswith("s") or k == "num_prompts"}
    f.write_text(json.dumps({**summary, "request_throughput": 1.0}))
    rc, _, err = _run([str(f)], capsys)
    assert rc == 2 and "run vllm bench serve with --save-detailed" in err


def test_a_trace_file_is_checked_line_by_line() -> None:
    good = json.dumps({"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [1, 2]})
    short = json.dumps({"timestamp": 1, "input_length": 40, "output_length": 4, "hash_ids": [1]})
    back = json.dumps({"timestamp": -1, "input_length": 5, "output_length": 4, "hash_ids": [9]})
    with pytest.raises(TraceError) as e:
        parse_trace("\n".join([good, short, back, '{"timestamp": 2}']), "t.jsonl")
    assert [p.split(":")[1] for p in e.value.problems] == ["2", "3", "4"]
    assert "1 hash_ids cover 16 tokens, input_length is 40" in e.value.problems[0]
    assert "timestamp earlier than the line before → fix: sort by timestamp" in e.value.problems[1]
    assert "missing or bad input_length, output_length" in e.value.problems[2]


def test_expected_hits_count_whole_blocks_of_a_seen_chain() -> None:
    a = TraceRequest(0, 48, 1, (1, 2, 3))
    b = TraceRequest(1, 48, 1, (1, 2, 9))  # two blocks shared
    c = TraceRequest(2, 48, 1, (5, 2, 3))  # block 2 equal, but after another first block
    d = TraceRequest(3, 48, 1, (1, 2, 3))  # all of a: the last token is computed -> 2 blocks
    assert expected_hits([a, b, c, d]) == (32 + 32, 4 * 48)
    ids = prefix_hash_ids([(1,) * 40, (1,) * 33 + (2,) * 7, None], [40, 40, 40])
    assert ids[1][:2] == ids[0][:2] and ids[1][2] != ids[0][2]
    assert not set(ids[2]) & set(ids[0] + ids[1])


def test_a_trace_slice_is_a_workload(tmp_path: Path) -> None:
    w = TraceWorkload.load(SHIPPED, num_prompts=100, request_rate=8.0, seed=3)
    assert isinstance(w, Workload) and w.ignore_eos
    assert w.time_scale() == pytest.approx(w.trace_rate / 8.0)
    reqs = w.requests()
    assert len(reqs) == 100 and reqs[0].timestamp == 0.0
    assert w.output_len == round(sum(r.output_length for r in reqs) / 100)
    assert all(str(h).startswith("3.0.") for h in reqs[0].hash_ids)
    assert 0.75 < w.expected_hit_rate < 0.85  # the 1024-token system prompt of ~1250
    # another seed: other prompt blocks, the same lengths and arrivals
    other = TraceWorkload.load(SHIPPED, num_prompts=100, request_rate=8.0, seed=4).requests()
    assert [(r.timestamp, r.input_length) for r in other] == [(r.timestamp, r.input_length) for r in reqs]
    assert not {h for r in other for h in r.hash_ids} & {h for r in reqs for h in r.hash_ids}
    # the warm-up: the slice's own arrivals and lengths (all of them), other prompt blocks
    warm = w.warmup(50, 999)
    assert warm.start == 0 and warm.num_prompts == 100 and warm.request_rate == 8.0
    assert [(r.timestamp, r.input_length) for r in warm.requests()] == [
        (r.timestamp, r.input_length) for r in reqs]
    assert not {h for r in warm.requests() for h in r.hash_ids} & {h for r in reqs for h in r.hash_ids}
    assert w.warmup(150, 999).num_prompts == 150  # a larger warm-up runs on into the trace
    full = parse_trace(SHIPPED.read_text(), "x")
    assert w.dataset_args("s.jsonl") == [
        "--dataset-name", "timed_trace", "--dataset-path", "s.jsonl",
        "--timed-trace-chunk-hash-size", "16", "--timed-trace-sec-multiplier", f"{w.time_scale():.6g}"]
    # a slice past the end wraps round, a lap later and with fresh blocks
    lap = TraceWorkload.load(SHIPPED, num_prompts=20, start=len(full) - 10).requests()
    assert [r.timestamp for r in lap] == sorted(r.timestamp for r in lap)
    assert str(lap[10].hash_ids[0]).startswith("0.1.")
    assert workload_from_dict(w.to_dict()) == w
    # a replaced field keeps the slice's own numbers consistent (the knee's batch-1 slice)
    five = replace(w, num_prompts=5, request_rate=math.inf)
    assert five.output_len == round(sum(r.output_length for r in reqs[:5]) / 5) != w.output_len
    # read back where the trace is not: as recorded
    gone = workload_from_dict({**w.to_dict(), "trace": str(tmp_path / "absent.jsonl")})
    assert (gone.input_len, gone.expected_hit_rate) == (w.input_len, w.expected_hit_rate)
    assert workload_from_dict(Workload().to_dict()) == Workload()


def test_the_gate_tells_the_traces_own_prefixes_from_a_replay() -> None:
    w = TraceWorkload.load(SHIPPED, num_prompts=200, request_rate=10.0)
    e = w.expected_hit_rate
    assert prefix_cache_issue(e - 0.05, w) is None  # its own shared prefixes: expected hits
    assert prefix_cache_issue(e + 0.4 * (1 - e), w) is None
    why = prefix_cache_issue(0.99, w)  # the same prompts sent again
    assert why == (f"prefix cache hit rate 99% where the trace's own shared prefixes give "
                   f"{e:.0%}: prompts were replayed, results are inflated")
    # the rate check compares with the slice's own schedule, not the trace's mean
    rate = w.scheduled_rate()
    reqs = w.requests()
    starts = [100 + r.timestamp * w.time_scale() for r in reqs]
    raw = {"completed": 200, "failed": 0, "total_output_tokens": sum(r.output_length for r in reqs),
           "start_times": starts}
    assert validity_issues(raw, w) == []
    raw["start_times"] = [100 + (s - 100) * 2 for s in starts]
    assert validity_issues(raw, w) == [
        f"offered rate {rate / 2:.2f} req/s vs requested {rate:g} (tolerance 21%): the client "
        "could not keep the schedule"]


def test_the_shipped_trace_is_its_script_s_output(tmp_path: Path) -> None:
    out = tmp_path / "chat.jsonl"
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_chat_trace.py"), "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_bytes() == SHIPPED.read_bytes()
    assert SHIPPED.stat().st_size < 200_000
    reqs = parse_trace(SHIPPED.read_text(), "x")
    assert all(r.hash_ids[:64] == tuple(range(64)) for r in reqs)  # the shared system prompt
    gaps = [b.timestamp - a.timestamp for a, b in zip(reqs, reqs[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) / mean
    assert 1.6 < cv < 2.6  # gamma shape 0.25: cv 2, bursty

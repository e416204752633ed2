"""The loop on a trace with the fake vllm: tune and sweep replay slices of it with
`--dataset-name timed_trace`, warm up on another slice, and the validity gate accepts the
trace's own shared prefixes but rejects a replay of the same prompts."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from course_utils.core.records import PointPaths
from course_utils.core.slo import SLO
from course_utils.core.workload import TraceWorkload, parse_trace
from course_utils.lab import measure as lab_measure
from course_utils.lab.cli import add_cli
from course_utils.lab.tune import tune
from tests.lab.test_labs_replay import (  # noqa: F401 (fixture)
    LAB02,
    SLO_PARAMS,
    _run,
    _text,
    fake_env,
)

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
            bench_kwargs={"timeout_s": 60}, warmup_prompts=2, metrics_interval_s=0.05,
            gpu_memory_gib=24.0, progress=False)


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The example trace's script with small lengths: 64 shared tokens, short turns."""
    out = tmp_path / "small.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_chat_trace.py"), "--out", str(out),
         "--requests", "40", "--system", "64", "--user-median", "24", "--answer-median", "6",
         "--answer-sigma", "0.3", "--rate", "20"],
        check=True, capture_output=True)
    return out


def _argv(tmp_path: Path) -> list[list[str]]:
    p = tmp_path / "bench-argv.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()]


def test_tune_on_a_trace_end_to_end(tmp_path: Path, fake_vllm: Path, small_trace: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_BENCH_ARGV", str(tmp_path / "bench-argv.jsonl"))
    w = TraceWorkload.load(small_trace, num_prompts=16, request_rate=40.0)
    summary = tune("fake-model", {"max_num_seqs": [1, 16]}, workload=w,
                   slo=SLO.parse("ttft:300 tpot:200"), out_dir=tmp_path / "t",
                   base_knobs={"max_num_seqs": 1}, max_steps=2, warmup_share=0.5, **FAST)
    assert summary["outcome"] and summary["serve_command"].startswith("vllm serve fake-model")
    points = [json.loads(x) for x in (tmp_path / "t" / "points.jsonl").read_text().splitlines()]
    assert len(points) >= 2 and all(p["status"] == "ok" for p in points)
    for p in points:
        assert p["workload"]["trace"] == str(small_trace) and p["workload"]["start"] == 0
        assert p["valid"], p["validity_issues"]
        for win in p["windows"]:  # (a bursty warm-up slice may peak lower: re-measured)
            assert not [i for i in win["validity_issues"] if "warm-up" not in i]
            # the shared system prompt hits, never more than the trace's own prefixes give
            assert 0.2 < win["prefix_cache_hit_rate"] <= w.expected_hit_rate + 0.02
    # every call replayed a slice with timed_trace at the trace's scaled time
    calls = _argv(tmp_path)
    assert all(c[c.index("--dataset-name") + 1] == "timed_trace" for c in calls)
    assert all(c[c.index("--timed-trace-sec-multiplier") + 1] == f"{w.time_scale():.6g}"
               for c in calls)
    assert not any("--random-input-len" in c or "--request-rate" in c for c in calls)
    # the window replayed the first 16 requests
    d = PointPaths.of(tmp_path / "t", points[0]["key"]).dir
    full = parse_trace(small_trace.read_text(), "x")
    window = parse_trace((d / "bench.trace.jsonl").read_text(), "w")
    warm = parse_trace((d / "warmup.trace.jsonl").read_text(), "w")
    assert [r.input_length for r in window] == [r.input_length for r in full[:16]]
    # the warm-up: the window's own arrivals and lengths (so its bursts), other prompt blocks
    assert [(r.timestamp, r.input_length) for r in warm] == [
        (r.timestamp, r.input_length) for r in window]
    assert not {h for r in warm for h in r.hash_ids} & {h for r in window for h in r.hash_ids}


def test_a_replayed_trace_window_is_rejected(tmp_path: Path, fake_vllm: Path,
                                             small_trace: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every window with the same seed: the second sends the first one's prompts again."""
    monkeypatch.setattr(lab_measure, "WINDOW_SEED_STRIDE", 0)
    from course_utils.lab.sweep import sweep

    w = TraceWorkload.load(small_trace, num_prompts=16, request_rate=40.0)
    recs = sweep("fake-model", "max_num_seqs", [16], workload=w, slo=SLO.parse("ttft:5000"),
                 out_dir=tmp_path / "s", repeats=1, remeasure=2, **FAST)
    first, *again = recs[0]["windows"]
    assert not [i for i in first["validity_issues"] if i.startswith("prefix cache")]
    assert first["prefix_cache_hit_rate"] <= w.expected_hit_rate + 0.02
    assert len(again) >= 2  # until the re-measure budget is spent
    e = f"{w.expected_hit_rate:.0%}"
    for x in again:
        assert not x["valid"] and x["prefix_cache_hit_rate"] > 0.9
        assert any(i.endswith(f"where the trace's own shared prefixes give {e}: prompts were "
                              "replayed, results are inflated") for i in x["validity_issues"])


@pytest.mark.parametrize("tokens_per_token", [1.4, 1.45])
def test_trace_prompts_are_scaled_to_the_servers_tokenizer(
        tokens_per_token: float, tmp_path: Path, fake_vllm: Path, small_trace: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """timed_trace's random prompts come back longer from the server's tokenizer: the first
    window (no warm-up) is rejected for it; the next keeps every request's hash blocks,
    samples fewer tokens per block and is counted at about the trace's lengths."""
    monkeypatch.setenv("FAKE_VLLM_PROMPT_TOKEN_RATIO", str(tokens_per_token))
    monkeypatch.setenv("FAKE_VLLM_BENCH_ARGV", str(tmp_path / "bench-argv.jsonl"))
    monkeypatch.setattr(lab_measure, "_TRACE_TOKENS", {})
    from course_utils.lab.sweep import sweep

    w = TraceWorkload.load(small_trace, num_prompts=16, request_rate=40.0)
    want = sum(r.input_length for r in w.requests())
    fast = {**FAST, "warmup_prompts": None}
    recs = sweep("fake-model", "max_num_seqs", [16], workload=w, slo=SLO.parse("ttft:5000"),
                 out_dir=tmp_path / "s", repeats=0, remeasure=4, warmup_share=0.0, **fast)
    first, *rest = recs[0]["windows"]
    assert not first["valid"] and any(i.startswith("the server counted 1.")
                                      and "x the trace's prompt tokens" in i
                                      for i in first["validity_issues"])
    # a loaded machine can also reject a window for its warm-up; none again for the prompts
    assert rest and rest[-1]["valid"], [x["validity_issues"] for x in rest]
    assert not [i for x in rest for i in x["validity_issues"] if "the trace's prompt" in i]
    last = len(rest)
    d = PointPaths.of(tmp_path / "s", recs[0]["key"]).dir
    bench = [json.loads((d / f).read_text()) for f in ("bench.json", f"bench-w{last}.json")]
    got = [b["total_input_tokens"] for b in bench]
    assert first["trace_token_ratio"] == 1.0 and abs(got[0] / want - tokens_per_token) < 0.08
    ratio = rest[-1]["trace_token_ratio"]
    if last == 1:
        assert ratio == round(got[0] / want, 4)  # learnt from the first call's completed requests
    assert abs(ratio - tokens_per_token) < 0.08
    assert abs(got[1] / want - 1.0) < 0.1
    # every request keeps its blocks: vLLM expands each hash id, the last one partly
    c2 = round(16 / ratio)
    sent = parse_trace((d / f"bench-w{last}.trace.jsonl").read_text(), "w", c2)
    unsalted = [[h.split(".", 2)[2] for h in r.hash_ids] for r in sent]  # seed.lap.id
    assert unsalted == [[h.split(".", 2)[2] for h in r.hash_ids] for r in w.requests()]
    assert [math.ceil(r.input_length / c2) for r in sent] == [
        math.ceil(r.input_length / 16) for r in w.requests()]
    assert sum(bench[1]["input_lens"]) == got[1]
    chunks = [c[c.index("--timed-trace-chunk-hash-size") + 1] for c in _argv(tmp_path)]
    assert chunks[0] == "16" and chunks[-1] == str(c2) and len(chunks) == last + 1


def test_cli_workload_flag(tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path,
                           dummy_model: Path, small_trace: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args([
        "sweep", "--model", str(dummy_model), "--knob", "max_num_seqs", "--values", "8",
        "--slo", "ttft:5000 tpot:1000", "--workload", str(small_trace), "--rate", "40",
        "--num-prompts", "12", "--out", str(tmp_path / "o"), "--load-format", "dummy",
        "--no-progress", "--startup-timeout", "20", "--gpu-memory-gib", "24",
    ])
    assert args.func(args) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rows[0]["status"] == "ok" and rows[0]["valid"] is True
    rec = json.loads((tmp_path / "o" / "points.jsonl").read_text().splitlines()[0])
    assert rec["workload"]["num_prompts"] == 12 and rec["workload"]["request_rate"] == 40.0
    assert rec["slo"].startswith("ttft")


@pytest.mark.usefixtures("fake_env")
def test_lab02_runs_the_loop_on_a_trace(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "slo"
    params = {**SLO_PARAMS, "workload": str(small_trace), "num_prompts": 24,
              "knee_rates": [20, 60], "rate": 30, "candidates": [2, 8], "max_steps": 2}
    nb = _run(LAB02, out, {"backend": "vllm", **params})
    text = _text(nb)
    w = TraceWorkload.load(small_trace, num_prompts=24)
    assert (f"trace {small_trace}: 24 requests, recorded at {w.trace_rate:.2f} req/s (a rate "
            f"scales its time), {w.expected_hit_rate:.0%} of prompt tokens") in text
    knee_recs = [json.loads(x) for x in (out / "knee.jsonl").read_text().splitlines()]
    assert {r["workload"]["request_rate"] for r in knee_recs if "windows" in r} == {20.0, 60.0}
    points = [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines()]
    assert points and all(p["workload"]["trace"] == str(small_trace) for p in points)
    assert {p["workload"]["request_rate"] for p in points} == {30.0}
    assert json.loads((out / "params.json").read_text())["workload"] == str(small_trace)


@pytest.mark.usefixtures("fake_env")
def test_trace_vs_fixed_runs_both_arms_at_the_fixed_arms_rate(
        small_trace: Path, tmp_path: Path, dummy_model: Path) -> None:
    """tools/gpu/trace_vs_fixed.sh: the fixed arm (the trace's mean lengths) picks its rate
    from its knee; the trace arm runs lab 02 on the trace at that rate."""
    import os

    run = tmp_path / "run"
    env = {**os.environ, "PY": sys.executable, "MODEL": str(dummy_model),
           "PYTHONPATH": str(ROOT / "src"), "TRACE": str(small_trace), "PROMPTS": "16",
           "KNEE_RATES": "[20, 60]", "KNEE_FRACTION": "0.5", "SLO": "ttft:5000 tpot:1000",
           "CANDIDATES": "[8]", "SECOND": "[]", "LAB_TIMEOUT_S": "200",
           "SESSION_T0_FILE": str(tmp_path / "no-stamp")}
    env.pop("OUT", None)
    script = str(ROOT / "tools" / "gpu" / "trace_vs_fixed.sh")
    early = subprocess.run(["bash", script, "trace", str(run)], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    assert early.returncode == 2 and "run the fixed arm first, or set RATE" in early.stdout
    # one device call of session_trace.sh: the fixed arm, then the trace arm at its rate
    session = str(ROOT / "tools" / "gpu" / "session_trace.sh")
    back = tmp_path / "out"  # what a device call returns
    back.mkdir()
    p = subprocess.run(["bash", session, str(run)], capture_output=True, text=True, timeout=400,
                       env={**env, "OUT": str(back), "CALL_S": "390"}, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sorted(f.name for f in back.iterdir()) == ["commands.log", "fixed.tgz", "trace.tgz"]
    for arm in ("fixed", "trace"):
        with tarfile.open(back / f"{arm}.tgz") as tf:
            names = tf.getnames()
        assert f"{arm}/slo/knee.jsonl" in names and f"{arm}/slo/points.jsonl" in names
    again = subprocess.run(["bash", session, str(run)], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    assert "fixed: done" in again.stdout and "trace: done" in again.stdout, again.stdout
    w = TraceWorkload.load(small_trace, num_prompts=16)
    fixed = [json.loads(x) for x in (run / "fixed" / "slo" / "points.jsonl").read_text().splitlines()]
    trace = [json.loads(x) for x in (run / "trace" / "slo" / "points.jsonl").read_text().splitlines()]
    assert fixed[0]["workload"]["request_rate"] == 30.0  # 0.5 x the knee, 60
    assert (fixed[0]["workload"]["input_len"], fixed[0]["workload"]["output_len"]) == (
        w.input_len, w.output_len)
    assert "trace" not in fixed[0]["workload"] and fixed[0]["workload"]["prefix_len"] == 0
    assert {p["workload"]["request_rate"] for p in trace} == {30.0}
    assert all(p["workload"]["trace"] == str(small_trace) for p in trace)
    assert (run / "trace" / "slo" / "knee.jsonl").is_file()


def test_a_trace_bench_uses_vllm_0_26_flags_only(small_trace: Path, tmp_path: Path) -> None:
    from course_utils.lab.bench import bench_args

    flags = {ln.strip() for ln in (ROOT / "tests" / "fakes" / "vllm_0_26_0_bench_serve_flags.txt")
             .read_text().splitlines() if ln.startswith("--")}
    w = TraceWorkload.load(small_trace, num_prompts=16, request_rate=10.0, max_concurrency=4)
    argv = bench_args("http://h:1", "m", w, None, tmp_path, "bench-w2.json")
    used = {a for a in argv if a.startswith("--")}
    assert used <= flags, used - flags
    assert argv[argv.index("--dataset-path") + 1] == str(tmp_path / "bench-w2.trace.jsonl")
    assert argv[argv.index("--num-prompts") + 1] == "16"
    assert argv[argv.index("--max-concurrency") + 1] == "4"
    assert "--request-rate" not in argv and "--random-input-len" not in argv

"""The validity gate of measure(): a window with a vLLM JIT compile is invalid and measured
again on the warm server; decisions use the clean windows only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils.core import keep
from course_utils.core.records import ServedPoint, Window, Workload, read_text
from course_utils.core.slo import SLO
from course_utils.core.validity import jit_issue
from course_utils.core.vllm_logs import parse_sweep_log
from course_utils.lab.measure import MeasureConfig, jit_in_log_span
from course_utils.lab.tune import tune

ROOT = Path(__file__).resolve().parents[2]
SWEEP_LOG = ROOT / "labs/results/h200-2026-11-29b/sidebyside/sweep-1.log"


def _server_log(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    """The real 0.26.0 sweep log without side_by_side.sh's time prefix (the text vLLM
    wrote), and the byte span of each measured window in it ("Starting main benchmark
    run..." to "[END BENCHMARK]")."""
    out = tmp_path / "serve.log"
    spans, start, pos = [], None, 0
    with open(out, "wb") as fh:
        for line in read_text(SWEEP_LOG).splitlines(keepends=True):
            text = re.sub(r"^\d+\.\d+ ", "", line).encode()
            if "Starting main benchmark run..." in line:
                start = pos
            if "[END BENCHMARK]" in line and start is not None:
                spans.append((start, pos))
                start = None
            fh.write(text)
            pos += len(text)
    return out, spans


def test_a_real_window_with_a_topk_topp_jit_compile_is_invalid(tmp_path: Path) -> None:
    log, spans = _server_log(tmp_path)
    assert len(spans) >= 2
    jit = jit_in_log_span(log, *spans[0])
    assert [j["kernel"] for j in jit] == ["_topk_topp_kernel"]
    assert jit[0]["stamp"] == "11-29 11:45:29"
    issue = jit_issue([j["kernel"] for j in jit])
    assert issue is not None and "_topk_topp_kernel" in issue
    # the same window as a record: invalid, so no keep rule can use it
    w = Window(index=0, purpose="measure", seed=0, status="ok", jit=jit,
               valid=issue is None, validity_issues=[issue])
    p = ServedPoint(key="k", knob="max_num_seqs", value=64, knobs={}, workload={}, slo="",
                    status="ok", windows=[w])
    assert not p.valid and keep.best_point([p]) is None
    assert keep.decide([p], 10.0).decision == "undecided"
    # the sweep log's own parse agrees: the compile fell inside the first measured window
    first = parse_sweep_log(read_text(SWEEP_LOG))["servers"][0]["jit_windows"][0]
    assert first["jit"] == ["_topk_topp_kernel"] and first["main_start"] is not None


def test_a_span_without_a_compile_has_none(tmp_path: Path) -> None:
    log, spans = _server_log(tmp_path)
    # the bytes before the first window (start-up and the bench's set-up) hold the monitor's
    # "activated" line, which is not a compile
    assert jit_in_log_span(log, 0, spans[0][0]) == []


W = Workload(input_len=16, output_len=8, num_prompts=12, request_rate=400)
FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
            bench_kwargs={"timeout_s": 60}, metrics_interval_s=0.05, gpu_memory_gib=24.0,
            progress=False)


def test_tune_remeasures_a_window_with_a_jit_compile_and_decides_on_clean_ones(
        tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warm = MeasureConfig().warmup_workload(W)
    assert warm is not None
    # every server logs vLLM's JIT line 3 requests into window 0 and stalls 1 s
    monkeypatch.setenv("FAKE_VLLM_JIT_AT", str(warm.num_prompts + 3))
    monkeypatch.setenv("FAKE_VLLM_JIT_STALL_S", "1.0")
    out = tmp_path / "t"
    summary = tune("fake-model", {"max_num_seqs": [8]}, workload=W,
                   slo=SLO.parse("ttft:5000 tpot:1000"), out_dir=out,
                   base_knobs={"max_num_seqs": 2}, max_steps=1, **FAST)
    points = [ServedPoint.from_json(json.loads(x))
              for x in (out / "points.jsonl").read_text().splitlines()]
    assert [p.value for p in points] == [None, 8]
    for p in points:
        w0, *rest = p.windows
        assert [j["kernel"] for j in w0.jit] == ["_topk_topp_kernel"]
        assert not w0.valid and any("JIT" in i for i in w0.validity_issues)
        assert [w.purpose for w in rest] == ["remeasure", "repeat"]
        assert all(w.valid and not w.jit for w in rest)
        # the stall inside window 0 cost it most of its goodput: a confound, not the knob
        assert w0.score is not None and all(
            w.score is not None and w0.score.request_goodput < 0.5 * w.score.request_goodput
            for w in rest)
        # the point's score is the mean of its clean windows only
        clean = [w.score.objective("request_goodput") for w in rest if w.score]
        assert p.objective("request_goodput") == pytest.approx(sum(clean) / len(clean))
    steps = [json.loads(x) for x in (out / "tune.jsonl").read_text().splitlines()]
    base, step = steps[0], steps[1]
    assert base["score"] == pytest.approx(points[0].objective("request_goodput"))
    (r8,) = step["results"]
    assert r8["score"] == pytest.approx(points[1].objective("request_goodput"))
    assert [w["valid"] for w in r8["windows"]] == [False, True, True]
    assert step["decision"] in ("keep", "tie", "revert") and step["decision_why"]
    assert summary["stop_reason"]


def test_tune_draws_one_progress_bar_with_the_gpu_minutes_left(
        tmp_path: Path, fake_vllm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tune("fake-model", {"max_num_seqs": [8]}, workload=W, slo=SLO.parse("ttft:5000 tpot:1000"),
         out_dir=tmp_path / "t", base_knobs={"max_num_seqs": 2}, max_steps=1, gpu_minutes=30,
         repeats=0, **{**FAST, "progress": True})
    err = capsys.readouterr().err
    frames = [f for f in re.split(r"[\r\n]+", err) if f.strip()]
    assert frames and all(f.lstrip().startswith("tune:") for f in frames), frames[:3]
    assert any("baseline: ok | GPU min left ~" in f for f in frames)
    assert any("max_num_seqs=8: ok" in f for f in frames)

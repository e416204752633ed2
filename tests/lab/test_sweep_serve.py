"""vLLM's `bench sweep serve` output as lab.grid reads it, the sweep's files on the GPU host
(tools/gpu/sweep_files.py), sweep(prevalidate=False), faults.sh.

tests/fixtures/vllm_sweep_fake is the output of the real 0.26.0 `vllm bench sweep serve` CLI
against the fake server (see its README), not GPU evidence; the JIT counts also read the real
H200 runs of 2026-11-29 (labs/results/h200-2026-11-29{b,c}).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.core import knobs
from course_utils.core.records import PointPaths, read_text
from course_utils.core.slo import SLO
from course_utils.core.vllm_logs import parse_sweep_log
from course_utils.lab.bench import Workload
from course_utils.lab.grid import GridError, grid_points
from course_utils.lab.sweep import load_points, sweep
from tests.tooling import tool

files = tool("gpu/sweep_files.py")
gridrun = tool("gpu/gridrun.py")
main = files.main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "vllm_sweep_fake"
H200_SBS = ROOT / "labs" / "results" / "h200-2026-11-29b" / "sidebyside"
FLAGS = {ln.strip() for ln in (ROOT / "tests" / "fakes" / "vllm_0_26_0_bench_serve_flags.txt")
         .read_text().splitlines() if ln.startswith("--")}
SLO_ = SLO.parse("ttft:300 tpot:50")
W = Workload(input_len=16, output_len=8, num_prompts=12, request_rate=400)
FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
            bench_kwargs={"timeout_s": 60}, warmup_prompts=2, metrics_interval_s=0.05,
            gpu_memory_gib=24.0, progress=False)


def _vllm_runs() -> dict[int, dict]:
    out = {}
    for f in (FIXTURE / "vllm_sweep" / "grid").glob("SERVE-*/run=0.json"):
        d = json.loads(f.read_text())
        out[d["max_num_seqs"]] = d
    return out


# ---------------------------------------------------------------------------- the vLLM side


def test_fixture_is_read_as_vllm_wrote_it() -> None:
    pts = grid_points(FIXTURE / "vllm_sweep", SLO_)
    assert sorted(p.knobs["max_num_seqs"] for p in pts) == [64, 128]
    runs = _vllm_runs()
    for p in pts:
        raw = runs[p.knobs["max_num_seqs"]]
        (w,) = p.windows
        assert w.index == 0 and p.key.startswith("SERVE--max_num_seqs=")
        assert w.score is not None
        assert w.score.request_goodput == pytest.approx(raw["request_goodput"])
        meets = raw["p99_ttft_ms"] <= 300 and raw["p99_tpot_ms"] <= 50
        assert w.score.meets_slo is meets
        assert w.score.gate_goodput == pytest.approx(raw["request_throughput"] if meets else 0.0)
        assert w.valid and w.load["harness"] is False  # vLLM's own bench: no harness file
    # the experiment folder itself is accepted too
    assert len(grid_points(FIXTURE / "vllm_sweep" / "grid", SLO_)) == 2


def test_parse_sweep_log_counts_servers_and_spans() -> None:
    text = (FIXTURE / "sweep-1.log").read_text()
    t = parse_sweep_log(text)
    assert t["server_starts"] == 2
    assert [s["overrides"] for s in t["servers"]] == ["{'max_num_seqs': 64}",
                                                      "{'max_num_seqs': 128}"]
    for s in t["servers"]:
        assert s["benchmarks_done"] == 1  # "[END BENCHMARK]" glued to a line without "\n"
        assert 0 < s["ready_s"] < s["span_s"]
    # cut inside the second server (a call stopped by its time limit): no end, no bench
    cut = text[: text.index("[BEGIN BENCHMARK]", text.index("max_num_seqs': 128"))]
    t2 = parse_sweep_log(cut)
    assert t2["server_starts"] == 2
    assert t2["servers"][1]["end"] is None and t2["servers"][1]["benchmarks_done"] == 0


def test_timing_accumulates_over_resumed_calls(tmp_path: Path) -> None:
    log = tmp_path / "l.log"
    log.write_text((FIXTURE / "sweep-1.log").read_text())
    out = tmp_path / "timing.json"
    for wall in (40.0, 20.0):
        assert main(["timing", str(log), str(out), "--call-wall-s", str(wall), "--rc", "0"]) == 0
    tim = json.loads(out.read_text())
    assert len(tim["calls"]) == 2
    assert tim["wall_s"] == 60.0 and tim["gpu_minutes"] == 1.0 and tim["server_starts"] == 4


def test_bench_cmd_leaves_the_sweeps_own_flags_out() -> None:
    w = Workload(input_len=512, output_len=128, num_prompts=600, request_rate=45, seed=0,
                 ignore_eos=True)
    argv = gridrun.sweep_bench_cmd("/tmp/m", w, SLO_, base_url="http://127.0.0.1:8123")
    assert argv[:3] == ["vllm", "bench", "serve"]
    for flag in ("--save-result", "--result-dir", "--result-filename", "--percentile-metrics"):
        assert flag not in argv  # vllm/benchmarks/sweep/serve.py run_benchmark appends them
    i = argv.index("--goodput")
    assert argv[i + 1:i + 3] == ["ttft:300", "tpot:50"]
    assert argv[argv.index("--request-rate") + 1] == "45"
    assert argv[argv.index("--num-prompts") + 1] == "600"
    assert "--save-detailed" in argv and "--ignore-eos" in argv
    assert {a for a in argv if a.startswith("--")} <= FLAGS


def test_serve_params_couple_like_tune() -> None:
    spec = gridrun.GridSpec(axes=(("max_num_seqs", (64, 4096)),))
    assert gridrun.grid_combos(spec, gpu_memory_gib=24.0) == ([
        {"max_num_seqs": 64}, {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}], [])
    # 0.26.0 default on a >= 70 GiB GPU is 8192 tokens: nothing to couple
    assert gridrun.grid_combos(spec, gpu_memory_gib=140.0) == ([
        {"max_num_seqs": 64}, {"max_num_seqs": 4096}], [])
    combos, left_out = gridrun.grid_combos(spec, gpu_memory_gib=24.0, couple=False)
    assert combos == [{"max_num_seqs": 64}] and "max_num_seqs=4096" in left_out[0]


def test_shrink_keeps_what_compare_reads(tmp_path: Path) -> None:
    d = tmp_path / "v"
    shutil.copytree(FIXTURE / "vllm_sweep", d)
    f = next(d.glob("grid/SERVE-*/run=0.json"))
    raw = json.loads(f.read_text())
    raw["ttfts"] = [0.01] * 5000
    f.write_text(json.dumps(raw))
    csv_ = d / "grid" / "summary.csv"
    csv_.write_text('x,ttfts\n1,"' + "0.01," * 5000 + '"\n')
    assert files.shrink_results(d, max_kb=16) == 2
    assert csv_.read_text().splitlines() == ["x", "1"]
    got = json.loads(f.read_text())
    assert got["ttfts"]["stripped_list"] is True and got["ttfts"]["n"] == 5000
    assert got["request_goodput"] == raw["request_goodput"]
    assert len(grid_points(d, SLO_)) == 2
    bad = tmp_path / "bad" / "SERVE--max_num_seqs=64"
    bad.mkdir(parents=True)
    (bad / "run=0.json").write_text(json.dumps({"date": "x"}))
    with pytest.raises(GridError, match="not a vLLM bench result"):
        grid_points(tmp_path / "bad", SLO_)
    with pytest.raises(GridError, match="no such folder"):
        grid_points(tmp_path / "missing", SLO_)


# ---------------------------------------------------------------------------- prevalidate


def test_prevalidate_false_lets_vllm_reject_the_combination(
        tmp_path: Path, fake_vllm: Path, server_starts) -> None:
    base = {"max_num_seqs": 256}
    with pytest.raises(knobs.KnobError, match="must be >= max_num_seqs"):
        sweep("fake-model", "max_num_batched_tokens", [128], workload=W, slo=SLO_,
              out_dir=tmp_path / "o", base_knobs=base, **FAST)
    assert server_starts() == 0  # the default rejects before any server starts
    recs = sweep("fake-model", "max_num_batched_tokens", [128, 512], workload=W, slo=SLO_,
                 out_dir=tmp_path / "o", base_knobs=base, prevalidate=False,
                 early_stop=False, **FAST)
    assert server_starts() == 2  # the server judged it, and the sweep went on
    assert [r["status"] for r in recs] == ["failed", "ok"]
    assert recs[0]["reason"] == ("invalid knob combination: max_num_batched_tokens (128) must "
                                 "be >= max_num_seqs (256); raise --max-num-batched-tokens "
                                 "with it")
    assert "--max-num-seqs 256 --max-num-batched-tokens 128" in recs[0]["serve_cmd"]
    log = PointPaths.of(tmp_path / "o", recs[0]["key"]).server_log.read_text()
    assert "ValueError: max_num_batched_tokens (128) must be greater than or equal to" in log
    # types are still coerced; a knob on its own is still checked
    with pytest.raises(knobs.KnobError, match="not a valid int"):
        sweep("fake-model", "max_num_seqs", ["many"], workload=W, slo=SLO_,
              out_dir=tmp_path / "o", prevalidate=False, **FAST)
    recs = sweep("fake-model", "max_num_batched_tokens", ["128"], workload=W, slo=SLO_,
                 out_dir=tmp_path / "o", base_knobs=base, prevalidate=False, **FAST)
    assert recs[0]["value"] == 128 and server_starts() == 2  # resumed: same point
    assert len(load_points(tmp_path / "o")) == 2


def test_prevalidate_default_keeps_point_keys(tmp_path: Path, fake_vllm: Path) -> None:
    a = sweep("fake-model", "max_num_seqs", [4], workload=W, slo=SLO_, out_dir=tmp_path / "a",
              **FAST)
    b = sweep("fake-model", "max_num_seqs", [4], workload=W, slo=SLO_, out_dir=tmp_path / "b",
              prevalidate=False, **FAST)
    assert a[0]["key"] == b[0]["key"]

    def flags(cmd: str) -> set[tuple[str, str]]:  # unchecked flags come after --host/--port
        t = cmd.split()
        return {(t[i], t[i + 1]) for i in range(len(t) - 1)
                if t[i].startswith("--") and t[i] != "--port"}

    assert flags(a[0]["serve_cmd"]) == flags(b[0]["serve_cmd"])
    assert ("--max-num-seqs", "4") in flags(b[0]["serve_cmd"])


# ---------------------------------------------------------------------------- faults.sh


def test_faults_script_records_three_failures_and_goes_on(tmp_path: Path, fake_vllm: Path,
                                                          fake_nvidia_smi: Path,
                                                          dummy_model: Path,
                                                          server_starts) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "VLLM": str(fake_vllm / "vllm"), "PY": sys.executable,
           "MODEL": str(dummy_model),  # preflight: a dummy folder whose tokenizer covers it
           "GPU_GIB": "24", "FAULTS_PROMPTS": "12", "FAULTS_RATE": "400",
           # the fake fails every start below gpu_memory_utilization 0.2 as "weights do not
           # fit"; on the H200 0.118 reaches vLLM's KV check (see faults.sh)
           "FAULT_KV_GMU": "0.15", "PYTHONPATH": str(ROOT / "src")}
    env.pop("OUT", None)
    p = subprocess.run(["bash", str(ROOT / "tools" / "gpu" / "faults.sh"), str(run)], env=env,
                       capture_output=True, text=True, timeout=240, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    facts = json.loads((run / "faults" / "faults.json").read_text())
    assert facts["prevalidate_true"].startswith("KnobError before any server start")
    assert (facts["failed"], facts["ok"]) == (3, 1)
    reasons = [pt["reason"] or "" for pt in facts["points"]]
    assert reasons[0].startswith("invalid knob combination: max_num_batched_tokens (128)")
    assert reasons[1].startswith("weights do not fit") and reasons[2].startswith("weights do")
    assert facts["points"][3]["status"] == "ok"
    assert facts["points"][3]["knobs"] == {"max_model_len": 32768, "gpu_memory_utilization": 0.9}
    assert server_starts() == 4  # the rerun at the end resumed every point
    assert [(r["step"], r["points_before"], r["points_after"]) for r in facts["runs"]] == [
        ("all", 0, 4), ("all", 4, 4)]
    assert "resumed every point" in (run / "commands.log").read_text()


def test_coupled_combo_params_come_from_the_folder_and_the_json(tmp_path: Path) -> None:
    d = tmp_path / "v" / "grid"
    shutil.copytree(FIXTURE / "vllm_sweep" / "grid" / "SERVE--max_num_seqs=64",
                    d / "SERVE--max_num_seqs=4096-max_num_batched_tokens=4096")
    f = d / "SERVE--max_num_seqs=4096-max_num_batched_tokens=4096" / "run=0.json"
    raw = json.loads(f.read_text())
    raw.update(max_num_seqs=4096, max_num_batched_tokens=4096)
    f.write_text(json.dumps(raw))
    (p,) = grid_points(tmp_path / "v", SLO_)
    assert p.knobs == {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}
    assert p.knob == "max_num_seqs=4096, max_num_batched_tokens=4096"


# ---------------------------------------------------------------------------- JIT compiles


def test_sweep_log_counts_jit_only_inside_measured_windows() -> None:
    t1 = parse_sweep_log(read_text(H200_SBS / "sweep-1.log"))
    t2 = parse_sweep_log(read_text(H200_SBS / "sweep-2.log"))
    # call 1: 64, 128, 256 measured (one compile each), 1024 cut before its benchmark
    assert [s["jit_in_benchmark"] for s in t1["servers"]] == [1, 1, 1, 0]
    assert t1["jit_in_benchmark"] == 3 and t1["jit_outside_benchmark"] == 0
    # call 2 (--resume): three [SKIPPED BENCHMARK] windows, then 1024 measured
    assert [s["jit_in_benchmark"] for s in t2["servers"]] == [1]
    assert all(s["warmups_logged"] == [] for s in t1["servers"] + t2["servers"])
    jit = ("1.5 (EngineCore pid=1) WARNING 11-29 11:45:29 [jit_monitor.py:135] Triton kernel "
           "JIT compilation during inference: _topk_topp_kernel. This causes a latency spike")
    text = "\n".join(["0.1 [BEGIN BENCHMARK]", "0.2 [SKIPPED BENCHMARK]",
                      jit.replace("1.5", "0.3", 1), "1.0 [BEGIN SERVER]", "1.1 Server overrides: {'max_num_seqs': 64}", jit,
                      "2.0 [BEGIN BENCHMARK]", "2.1 Warming up with 8 requests...",
                      jit.replace("1.5", "2.2", 1), "3.0 x[END BENCHMARK]",
                      jit.replace("1.5", "3.1", 1), "4.0 [END SERVER]"])
    t = parse_sweep_log(text)
    assert (t["jit_in_benchmark"], t["jit_outside_benchmark"]) == (1, 3)
    assert t["servers"][0]["warmups_logged"] == [8]


def test_timing_records_jit_inside_benchmarks(tmp_path: Path) -> None:
    out = tmp_path / "timing.json"
    for n in (1, 2):
        assert main(["timing", str(H200_SBS / f"sweep-{n}.log"), str(out),
                     "--call-wall-s", "10"]) == 0
    tim = json.loads(out.read_text())
    assert [c["jit_in_benchmark"] for c in tim["calls"]] == [3, 1]
    assert tim["jit_in_benchmark"] == 4


# ------------------------------------------ 2026-11-29c: the fair run, same session and grid

C_SBS = ROOT / "labs" / "results" / "h200-2026-11-29c" / "sidebyside"


def test_sweep_log_measured_window_starts_after_the_warm_up() -> None:
    t = parse_sweep_log(read_text(C_SBS / "sweep-1.log"))
    # each combo: "Warming up with 8 requests...", the Triton compile, then the main run
    assert [s["jit_in_benchmark"] for s in t["servers"]] == [0, 0, 0]
    assert [s["jit_in_warmup"] for s in t["servers"]] == [1, 1, 1]
    assert [s["warmups_logged"] for s in t["servers"]] == [[8], [8], [8]]
    jit = ("{} (EngineCore pid=1) WARNING 11-29 11:45:29 [jit_monitor.py:135] Triton kernel "
           "JIT compilation during inference: _topk_topp_kernel. This causes a latency spike")
    text = "\n".join(["1.0 [BEGIN SERVER]", "1.1 Server overrides: {'max_num_seqs': 64}",
                      "2.0 [BEGIN BENCHMARK]", "2.1 Warming up with 8 requests...",
                      jit.format("2.2"), "2.3 Warmup run completed.",
                      "2.4 Starting main benchmark run...", jit.format("2.5"),
                      "3.0 [END BENCHMARK]", "3.1 [BEGIN BENCHMARK]", jit.format("3.2"),
                      "3.3 Starting main benchmark run...", "3.4 [END BENCHMARK]",
                      "3.5 [BEGIN BENCHMARK]", jit.format("3.6"), "4.0 [END SERVER]"])
    t = parse_sweep_log(text)
    # one in warm-up and one measured; one before a main run without warm-up (ready check);
    # one in a benchmark cut before its main run started: counted as measured (no proof)
    assert (t["jit_in_benchmark"], t["jit_in_warmup"]) == (2, 2)
    assert t["servers"][0]["jit_in_benchmark"] == 2 and t["servers"][0]["jit_in_warmup"] == 2

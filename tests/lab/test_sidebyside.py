"""Side by side (vLLM's `bench sweep serve` vs tune()), sweep(prevalidate=False), faults.sh.

The vLLM side reads tests/fixtures/vllm_sweep_fake (and vllm_sweep_fake_warmup, with
`--num-warmups 8`): the output of the real 0.26.0 `vllm bench sweep serve` CLI against the
fake server (see their READMEs), not GPU evidence. The like-for-like checks also read the
real H200 run of 2026-11-29 (labs/results/h200-2026-11-29{,b}).
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
from course_utils.lab.sidebyside import (
    compare,
    load_vllm_sweep,
    main,
    serve_params,
    shrink_results,
    sweep_bench_cmd,
)
from course_utils.lab.sidebyside_evidence import (
    SideBySideError,
    bench_cmd_warmups,
    table_markdown,
)
from course_utils.lab.sweep import load_points, sweep

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "vllm_sweep_fake"
WARM = ROOT / "tests" / "fixtures" / "vllm_sweep_fake_warmup"
H200_SBS = ROOT / "labs" / "results" / "h200-2026-11-29b" / "sidebyside"
H200_TUNE = ROOT / "labs" / "results" / "h200-2026-11-29" / "slo"
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


def _tune_dir(tmp_path: Path) -> Path:
    """A tune() folder: 3 points (one failed), elapsed 120 + 100 + 20 s = 4 GPU minutes."""
    d = tmp_path / "slo"
    d.mkdir()
    pts = [
        {"key": "a", "knobs": {"max_model_len": 4096, "max_num_seqs": 64}, "status": "ok",
         "startup_s": 80.0, "elapsed_s": 120.0,
         "score": {"request_goodput": 4.0, "gate_goodput": 0.0, "meets_slo": False,
                   "request_throughput": 9.0}},
        {"key": "b", "knobs": {"max_model_len": 4096, "max_num_seqs": 128}, "status": "ok",
         "startup_s": 70.0, "elapsed_s": 100.0,
         "score": {"request_goodput": 17.0, "gate_goodput": 17.0, "meets_slo": True,
                   "request_throughput": 17.0}},
        {"key": "c", "knobs": {"max_model_len": 4096, "max_num_seqs": 256}, "status": "failed",
         "reason": "CUDA out of memory", "elapsed_s": 20.0},
    ]
    (d / "points.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pts))
    steps = [{"step": 0, "kind": "baseline", "point": "a"},
             {"kind": "summary", "knobs": {"max_model_len": 4096, "max_num_seqs": 128},
              "request_goodput": 17.0, "gate_goodput": 17.0, "stop_reason": "plateau: test",
              "serve_command": "vllm serve m --max-num-seqs 128"}]
    (d / "tune.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    return d


# ---------------------------------------------------------------------------- the vLLM side


def test_fixture_is_read_as_vllm_wrote_it() -> None:
    rows = load_vllm_sweep(FIXTURE / "vllm_sweep", SLO_)
    assert sorted(r["params"]["max_num_seqs"] for r in rows) == [64, 128]
    runs = _vllm_runs()
    for r in rows:
        raw = runs[r["params"]["max_num_seqs"]]
        assert r["run_number"] == 0
        assert r["file"].startswith("grid/SERVE--max_num_seqs=")
        assert r["file"].endswith("/run=0.json")
        assert r["request_goodput"] == pytest.approx(raw["request_goodput"])
        meets = raw["p99_ttft_ms"] <= 300 and raw["p99_tpot_ms"] <= 50
        assert r["meets_slo"] is meets
        assert r["gate_goodput"] == pytest.approx(raw["request_throughput"] if meets else 0.0)
    # the experiment folder itself is accepted too
    assert len(load_vllm_sweep(FIXTURE / "vllm_sweep" / "grid", SLO_)) == 2


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
    argv = sweep_bench_cmd("/tmp/m", w, SLO_, base_url="http://127.0.0.1:8123")
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
    assert serve_params("max_num_seqs", [64, 4096], gpu_memory_gib=24.0) == [
        {"max_num_seqs": 64}, {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}]
    # 0.26.0 default on a >= 70 GiB GPU is 8192 tokens: nothing to couple
    assert serve_params("max-num-seqs", [64, 4096], gpu_memory_gib=140.0) == [
        {"max_num_seqs": 64}, {"max_num_seqs": 4096}]
    with pytest.raises(knobs.KnobError):
        serve_params("max_num_seqs", [64, 4096], gpu_memory_gib=24.0, couple=False)


# ---------------------------------------------------------------------------- compare


def test_compare_counts_restarts_minutes_and_ratios(tmp_path: Path) -> None:
    cmp = compare(FIXTURE / "vllm_sweep", _tune_dir(tmp_path), "ttft:300 tpot:50")
    v, o, r = cmp["vllm"], cmp["ours"], cmp["ratios_ours_over_vllm"]
    tim = json.loads((FIXTURE / "timing.json").read_text())
    assert v["server_starts"] == 2 and v["gpu_minutes"] == tim["gpu_minutes"]
    assert o["server_starts"] == 3  # a failed start is a restart too
    assert o["wall_s"] == 240.0 and o["gpu_minutes"] == 4.0
    best_v = max(d["request_goodput"] for d in _vllm_runs().values())
    assert v["best_request_goodput"]["request_goodput"] == pytest.approx(best_v)
    assert o["best_request_goodput"]["params"]["max_num_seqs"] == 128
    assert r["server_starts"] == 1.5
    assert r["gpu_minutes"] == round(4.0 / tim["gpu_minutes"], 3)
    assert r["best_request_goodput"] == round(17.0 / best_v, 3)
    assert o["kept_knobs"]["max_num_seqs"] == 128 and o["stop_reason"] == "plateau: test"
    md = table_markdown(cmp)
    assert "| server restarts | 2 | 3 | 1.50 |" in md
    assert "17.00 (max_model_len=4096, max_num_seqs=128)" in md
    # recorded without --num-warmups: cold runs, said so
    assert cmp["vllm"]["warmups"]["value"] == 0 and cmp["like_for_like"] is False


def test_compare_without_timing_counts_combos(tmp_path: Path) -> None:
    vdir = tmp_path / "v"
    shutil.copytree(FIXTURE / "vllm_sweep", vdir)
    cmp = compare(vdir, _tune_dir(tmp_path), SLO_)
    assert cmp["vllm"]["server_starts"] == 2
    assert cmp["vllm"]["gpu_minutes"] is None and cmp["ratios_ours_over_vllm"]["gpu_minutes"] is None
    # no bench_cmd.txt and no sweep logs next to it: unknown, not claimed either way
    assert cmp["like_for_like"] is None and cmp["confounds"] == []
    assert len(cmp["unknown"]) == 2
    assert "Like for like not established" in table_markdown(cmp)


def test_compare_says_clearly_when_a_folder_is_not_a_sweep(tmp_path: Path) -> None:
    tune = _tune_dir(tmp_path)
    with pytest.raises(SideBySideError, match="is not a `vllm bench sweep serve` output"):
        compare(tune, tune, SLO_)
    with pytest.raises(SideBySideError, match="no such folder"):
        compare(tmp_path / "missing", tune, SLO_)
    with pytest.raises(SideBySideError, match="is not a tune\\(\\) output"):
        compare(FIXTURE / "vllm_sweep", tmp_path, SLO_)
    bad = tmp_path / "bad" / "SERVE--max_num_seqs=64"
    bad.mkdir(parents=True)
    (bad / "run=0.json").write_text(json.dumps({"date": "x"}))
    with pytest.raises(SideBySideError, match="not a vLLM bench result"):
        load_vllm_sweep(tmp_path / "bad", SLO_)


def test_shrink_keeps_what_compare_reads(tmp_path: Path) -> None:
    d = tmp_path / "v"
    shutil.copytree(FIXTURE / "vllm_sweep", d)
    f = next(d.glob("grid/SERVE-*/run=0.json"))
    raw = json.loads(f.read_text())
    raw["ttfts"] = [0.01] * 5000
    f.write_text(json.dumps(raw))
    csv_ = d / "grid" / "summary.csv"
    csv_.write_text('x,ttfts\n1,"' + "0.01," * 5000 + '"\n')
    assert shrink_results(d, max_kb=16) == 2
    assert csv_.read_text().splitlines() == ["x", "1"]
    got = json.loads(f.read_text())
    assert got["ttfts"]["stripped_list"] is True and got["ttfts"]["n"] == 5000
    assert got["request_goodput"] == raw["request_goodput"]
    assert len(load_vllm_sweep(d, SLO_)) == 2


def test_cli_compare_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "c.json"
    assert main(["compare", str(FIXTURE / "vllm_sweep"), str(_tune_dir(tmp_path)),
                 "--slo", "ttft:300 tpot:50", "--json", str(js)]) == 0
    assert "| server restarts | 2 | 3 |" in capsys.readouterr().out
    assert json.loads(js.read_text())["ours"]["server_starts"] == 3


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
    (rows,) = load_vllm_sweep(tmp_path / "v", SLO_)
    assert rows["params"] == {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}


# ---------------------------------------------------------------------------- like for like


def _bench_cmd_cli(capsys: pytest.CaptureFixture[str], *extra: str) -> list[str]:
    assert main(["bench-cmd", "--model", "/tmp/m", "--base-url", "http://127.0.0.1:8123",
                 "--rate", "45", "--num-prompts", "600", "--slo", "ttft:300 tpot:50",
                 *extra]) == 0
    return capsys.readouterr().out.split()


def test_bench_cmd_cli_warms_up_like_our_harness(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _bench_cmd_cli(capsys)
    assert argv.count("--num-warmups") == 1
    assert argv[argv.index("--num-warmups") + 1] == "8"  # sweep.py's warmup_prompts default
    assert bench_cmd_warmups(argv) == 8
    assert {a for a in argv if a.startswith("--")} <= FLAGS
    assert "--num-warmups" not in _bench_cmd_cli(capsys, "--num-warmups", "0")
    argv = _bench_cmd_cli(capsys, "--num-warmups", "3")
    assert argv[argv.index("--num-warmups") + 1] == "3"
    with pytest.raises(SystemExit):
        _bench_cmd_cli(capsys, "--num-warmups", "-1")
    assert bench_cmd_warmups("vllm bench serve --num-warmups=5 --seed 0") == 5
    assert bench_cmd_warmups((H200_SBS / "bench_cmd.txt").read_text()) == 0


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


def test_compare_real_h200_run_is_not_like_for_like() -> None:
    cmp = compare(H200_SBS / "vllm_sweep", H200_TUNE, "ttft:300 tpot:50")
    v, o = cmp["vllm"], cmp["ours"]
    assert cmp["like_for_like"] is False
    assert v["warmups"] == {"value": 0, "source": str(H200_SBS / "bench_cmd.txt")}
    assert v["jit"]["jit_in_benchmark"] == 4
    assert {k: c["jit_in_benchmark"] for k, c in v["jit"]["per_combo"].items()} == {
        "max_num_seqs=64": 1, "max_num_seqs=128": 1, "max_num_seqs=256": 1,
        "max_num_seqs=1024": 1}
    assert len(cmp["confounds"]) == 2 and "no --num-warmups" in cmp["confounds"][0]
    # ours: not recorded in the run, so the default, labelled; its compiles fell in warm-up
    assert o["warmups"]["value"] == 8 and o["warmups"]["source"].startswith("course_utils")
    assert o["jit"]["jit_in_benchmark"] == 0 and len(o["jit"]["per_point"]) == 4
    assert v["best_request_goodput"]["request_goodput"] == 0.0
    assert cmp["ratios_ours_over_vllm"]["best_request_goodput"] is None
    md = table_markdown(cmp)
    assert ("| warm-up requests before each measured run | 0 (bench_cmd.txt: no "
            "`--num-warmups`) | 8 (course_utils default) | |") in md
    assert "| JIT compiles logged inside a measured run | 4 (max_num_seqs=64: 1;" in md
    assert "35.92 (max_model_len=4096, max_num_seqs=1024) | n/a (vLLM 0.00) |" in md
    assert "inf" not in md and "**Not like for like:**" in md
    json.dumps(cmp, allow_nan=False)  # no inf/NaN in the JSON either


def test_cli_compare_reads_the_given_bench_cmd(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bc = tmp_path / "bench_cmd.txt"
    bc.write_text((H200_SBS / "bench_cmd.txt").read_text().strip() + " --num-warmups 8\n")
    js = tmp_path / "c.json"
    assert main(["compare", str(H200_SBS / "vllm_sweep"), str(H200_TUNE), "--slo",
                 "ttft:300 tpot:50", "--bench-cmd", str(bc), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "| 8 (bench_cmd.txt: `--num-warmups`) |" in out
    cmp = json.loads(js.read_text())
    # the flag alone does not make it like for like: the logs show cold windows and JITs
    assert cmp["like_for_like"] is False
    assert any("no 'Warming up with N requests' line" in c for c in cmp["confounds"])
    with pytest.raises(SideBySideError, match="no such bench command file"):
        compare(H200_SBS / "vllm_sweep", H200_TUNE, SLO_, bench_cmd=tmp_path / "none.txt")


def test_compare_warmed_sweep_without_jit_is_like_for_like(tmp_path: Path) -> None:
    tune = _tune_dir(tmp_path)
    cmp = compare(WARM / "vllm_sweep", tune, SLO_)
    assert cmp["like_for_like"] is True and cmp["confounds"] == [] and cmp["unknown"] == []
    assert cmp["vllm"]["warmups"]["value"] == 8
    assert {k: c["warmups_logged"] for k, c in cmp["vllm"]["jit"]["per_combo"].items()} == {
        "max_num_seqs=64": [8], "max_num_seqs=128": [8]}
    assert "Not like for like" not in table_markdown(cmp)
    # the same sweep with one compile logged inside the second measured window
    d = tmp_path / "warm"
    shutil.copytree(WARM, d)
    log = d / "sweep-1.log"
    lines = log.read_text().splitlines()
    i = [n for n, ln in enumerate(lines) if "Starting main benchmark run" in ln][1]
    stamp = lines[i].split()[0]
    lines.insert(i + 1, f"{stamp} (EngineCore pid=7) WARNING 11-29 12:09:14 [jit_monitor.py:135]"
                        " Triton kernel JIT compilation during inference: _topk_topp_kernel.")
    log.write_text("\n".join(lines) + "\n")
    cmp = compare(d / "vllm_sweep", tune, SLO_)
    assert cmp["like_for_like"] is False
    assert cmp["confounds"] == ["vLLM logged 1 one-time JIT compile(s) inside its measured "
                                "runs (max_num_seqs=128: 1)"]


def test_compare_synthetic_warmups_no_jit(tmp_path: Path) -> None:
    """A bench command with warm-ups and logs with the warm-up line and no JIT line."""
    d = tmp_path / "sbs"
    shutil.copytree(FIXTURE, d)
    (d / "bench_cmd.txt").write_text((FIXTURE / "bench_cmd.txt").read_text().strip()
                                     + " --num-warmups 8\n")
    log = d / "sweep-1.log"
    # the old recording has no warm-up: it is caught from the log, not only from the flag
    tune = _tune_dir(tmp_path)
    cmp = compare(d / "vllm_sweep", tune, SLO_)
    assert cmp["like_for_like"] is False and "no 'Warming up" in cmp["confounds"][0]
    log.write_text("".join(
        ln + (f"{ln.split()[0]} Warming up with 8 requests...\n"
              if "Skipping endpoint ready check." in ln else "")
        for ln in log.read_text().splitlines(keepends=True)))
    cmp = compare(d / "vllm_sweep", tune, SLO_)
    assert cmp["like_for_like"] is True and cmp["confounds"] == []


# ------------------------------------------ 2026-11-29c: the fair run, same session and grid

C_SBS = ROOT / "labs" / "results" / "h200-2026-11-29c" / "sidebyside"
C_TUNE = ROOT / "labs" / "results" / "h200-2026-11-29c" / "slo"


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


def test_compare_fair_h200_run_is_like_for_like() -> None:
    """vLLM's sweep with --num-warmups 8 against tune() of the same session (rate 45, grid
    64/256/1024): both warm up, no compile inside a measured run; goodputs within 0.2 %."""
    cmp = compare(C_SBS / "vllm_sweep", C_TUNE, "ttft:300 tpot:50",
                  timing=C_SBS / "timing.json")
    v, o, r = cmp["vllm"], cmp["ours"], cmp["ratios_ours_over_vllm"]
    assert cmp["like_for_like"] is True and cmp["confounds"] == [] == cmp["unknown"]
    assert v["warmups"]["value"] == 8 and o["warmups"]["value"] == 8
    assert (v["jit"]["jit_in_benchmark"], v["jit"]["jit_in_warmup"]) == (0, 3)
    assert (o["jit"]["jit_in_benchmark"], o["jit"]["jit_in_warmup"]) == (0, 3)
    assert v["server_starts"] == o["server_starts"] == 3
    assert (v["gpu_minutes"], o["gpu_minutes"]) == (5.53, 6.37)
    # the GPU-minute gap is start-up: ours ran first, on a cold torch.compile cache
    assert (v["engine_init"]["starts"], o["engine_init"]["starts"]) == (3, 3)
    assert (v["engine_init"]["init_s"], o["engine_init"]["init_s"]) == (29.44, 83.3)
    assert o["engine_init"]["per_start"][0] == {"init_s": 46.26, "compile_s": 25.15}
    assert (round(v["best_request_goodput"]["request_goodput"], 2),
            round(o["best_request_goodput"]["request_goodput"], 2)) == (42.63, 42.69)
    assert v["best_request_goodput"]["params"] == {"max_num_seqs": 256}
    assert round(r["best_request_goodput"], 3) == 1.001
    md = table_markdown(cmp)
    assert "Not like for like" not in md
    assert "| JIT compiles logged inside a measured run | 0; 3 during the warm-up | 0; 3 " in md
    assert ("| engine init, summed over starts (of which compilation), s | 29.4 (11.9) over 3 "
            "| 83.3 (33.2) over 3 | |") in md
    assert json.loads((C_SBS / "compare.json").read_text())["like_for_like"] is True

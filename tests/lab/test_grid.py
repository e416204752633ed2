"""vLLM's grid on any workload (lab.grid, tools/gpu/gridrun.py + sweep_files.py, core.presets,
tools/gpu/side_by_side.sh + grid_decode.sh), against the fake vLLM and on a recorded fake
grid (tests/fixtures/grid_decode_fake, see its README)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from course_utils.core import knobs, presets
from course_utils.core.keep import best_point
from course_utils.core.records import Workload
from course_utils.core.slo import SLO
from course_utils.lab import cli, grid, rehearsal
from course_utils.lab.grid import compare
from tests.tooling import tool

gridrun = tool("gpu/gridrun.py")

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "grid_decode_fake"
DECODE12 = ROOT / "labs" / "results" / "h200-2026-11-30" / "decode12"
FAKES = ROOT / "tests" / "fakes"
TWO_H200 = "NVIDIA H200,143771,143000,580.159.04;NVIDIA H200,143771,143000,580.159.04"


# ---------------------------------------------------------------------------- the grid's combos


def test_decode_preset_grid_is_the_five_configs_the_loop_measured(tmp_path: Path) -> None:
    pre = presets.get("decode", "h200")
    spec = gridrun.parse_grid(pre.grid_spec())
    assert spec.mode == "one-at-a-time" and spec.with_defaults
    combos, skipped = gridrun.grid_combos(spec, pre.base, gpu_memory_gib=140)
    assert skipped == []
    assert [grid.combo_label(c) for c in combos] == [
        "defaults", "max_num_batched_tokens=2048", "max_num_batched_tokens=4096",
        "max_num_seqs=128", "max_num_seqs=256"]
    # the loop's points, as recorded: the same knob sets
    loop = {json.dumps(json.loads(line)["knobs"], sort_keys=True)
            for line in (DECODE12 / "points.jsonl").read_text().splitlines()}
    ours = {json.dumps({**pre.base, **{k: v for k, v in c.items() if k != "_benchmark_name"}},
                       sort_keys=True) for c in combos}
    assert ours == loop
    # two GPUs: 3 + 2, nothing twice, nothing lost
    halves = [gridrun.prepare(tmp_path / str(i), model="m", port=1, spec=spec,
                              workload=Workload(**pre.workload_kwargs()),
                              slo=SLO.parse(pre.slo), base=pre.base, gpu_memory_gib=140,
                              part=(i, 2))["part_combos"] for i in range(2)]
    assert [len(h) for h in halves] == [3, 2]
    assert sorted(map(grid.combo_label, halves[0] + halves[1])) == sorted(
        map(grid.combo_label, combos))


def test_two_knob_product_leaves_out_what_vllm_would_reject() -> None:
    spec = gridrun.parse_grid("max_num_seqs=128,256,1024 x max_num_batched_tokens=512,4096")
    assert spec.mode == "product" and not spec.with_defaults
    combos, skipped = gridrun.grid_combos(spec, {"max_model_len": 4096}, gpu_memory_gib=140)
    labels = [grid.combo_label(c) for c in combos]
    assert len(labels) == 5 and "max_num_seqs=1024, max_num_batched_tokens=512" not in labels
    assert len(skipped) == 1 and skipped[0].startswith(
        "max_num_seqs=1024, max_num_batched_tokens=512: ")
    # one knob: coupled like tune(couple=True) (max_num_seqs above the 2048 default)
    one, _ = gridrun.grid_combos(gridrun.parse_grid("max_num_seqs=4096"), gpu_memory_gib=24)
    assert one == [{"max_num_seqs": 4096, "max_num_batched_tokens": 4096}]


@pytest.mark.parametrize("bad", ["max_num_seqs", "nope=1,2", "max_num_seqs=1 x max_num_seqs=2",
                                 "a=1 x b=2 + c=3", "max_num_seqs=1 x b=1 x c=1"])
def test_bad_grid_specs_fail_in_one_line(bad: str) -> None:
    with pytest.raises((ValueError, knobs.KnobError)) as ei:
        gridrun.parse_grid(bad)
    assert "\n" not in str(ei.value)


def test_presets_are_data_for_every_constraint() -> None:
    assert presets.names() == ["decode", "knee", "kv", "prefill", "prefix"]
    for (name, gpu), p in presets.PRESETS.items():
        assert gpu in presets.GPUS and p.name == name
        SLO.parse(p.slo)
        knobs.validate(dict(p.base), entry="serve")
        for k, vals in p.candidates.items():
            for v in vals:
                knobs.validate({**p.base, k: v}, entry="serve")
        assert p.prefix_len < p.input_len and p.expect
    assert presets.get("decode", "h200").recorded == "h200-2026-11-30/decode12"
    assert presets.get("decode", "rtx4090") is presets.get("decode", "4090")
    with pytest.raises(KeyError, match="no preset"):
        presets.get("nope")
    with pytest.raises(KeyError, match="has no 'a100' size"):
        presets.get("decode", "a100")


# ---------------------------------------------------------------------------- the scripts


def _env(tmp_path: Path, fake_vllm: Path, dummy_model: Path, **kw: str) -> dict[str, str]:
    env = {**os.environ, "PY": sys.executable, "MODEL": str(dummy_model),
           "AFTER_BENCH_CMD": "true", "INPUT_LEN": "16", "OUTPUT_LEN": "8", "PROMPTS": "12",
           "RATE": "100", "FAKE_GPU": TWO_H200, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OUT", None)
    env.update(kw)
    return env


def _run(script: str, run: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "tools" / "gpu" / script), str(run)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_grid_decode_on_two_gpus_merges_compares_and_resumes(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    run = tmp_path / "run"
    env = _env(tmp_path, fake_vllm, dummy_model)
    p = _run("grid_decode.sh", run, env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert server_starts() == 5
    merged = run / "grid-decode"
    pts = grid.grid_points(merged / "vllm_sweep", "ttft:2000 tpot:15")
    assert [x.knob for x in pts] == [
        "defaults", "max_num_batched_tokens=2048", "max_num_batched_tokens=4096",
        "max_num_seqs=128", "max_num_seqs=256"]
    for x in pts:  # every run behind lab.measure's warm-up, and gated
        (w,) = x.windows
        h = json.loads((merged / "vllm_sweep" / "grid" / x.key / "run=0.harness.json")
                       .read_text())
        assert h["warmup"]["status"] == "ok" and h["warmup"]["num_prompts"] == 16
        assert h["warmup"]["seed"] != h["workload"]["seed"]
        assert w.valid == h["valid"] and w.load["harness"] is True
    # the two halves ran on different GPUs and ports, at the same time
    cmds = [json.loads((run / f"grid-decode-gpu{i}" / "grid.json").read_text())
            for i in range(2)]
    assert cmds[0]["serve_cmd"] != cmds[1]["serve_cmd"]
    log = (run / "commands.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=0 " in log and "CUDA_VISIBLE_DEVICES=1 " in log
    tim = json.loads((merged / "timing.json").read_text())
    parts = [json.loads((run / f"grid-decode-gpu{i}" / "timing.json").read_text())
             for i in range(2)]
    assert tim["server_starts"] == 5 and tim["parts"] == 2
    assert tim["wall_s"] == pytest.approx(sum(t["wall_s"] for t in parts), abs=0.02)
    assert tim["wall_clock_s"] == pytest.approx(max(t["wall_s"] for t in parts), abs=0.02)
    cmp = json.loads((merged / "compare.json").read_text())
    assert cmp["loop"]["server_starts"] == 5 and cmp["loop_pick_in_grid"]["label"] == "defaults"
    assert "| the loop's pick, measured in the grid |" in (merged / "compare.md").read_text()
    assert "调优循环" in (merged / "compare.zh.md").read_text()
    # no server left behind on either port
    for c in cmds:
        port = int(c["serve_cmd"].split("--port ")[1].split()[0])
        assert tool("gpu/sweep_files.py").servers_on_port(port) == []
    # a second call resumes: no combo starts a server again
    p2 = _run("grid_decode.sh", run, env)
    assert p2.returncode == 0, p2.stdout + p2.stderr
    assert server_starts() == 5


def test_a_recorded_partial_grid_carried_back_resumes(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    """The recorded decode grid (3 of 5 combos, shrunk by collect.py and sweep_files.py shrink)
    copied onto a fresh host resumes with vLLM's --resume: only the 2 missing combos start a
    server, the merged grid holds all 5, and the earlier call's timing is kept."""
    rec = ROOT / "labs" / "results" / "h200-2026-12-01" / "grid-decode"
    run = tmp_path / "run"
    part = run / "grid-decode-gpu0"
    shutil.copytree(rec, part)
    for gz in part.glob("sweep-*.log.gz"):  # side_by_side.sh numbers its logs after these
        subprocess.run(["gunzip", "-f", str(gz)], check=True)
    done = sorted(d.name for d in (part / "vllm_sweep" / "grid").iterdir())
    assert len(done) == 3
    env = _env(tmp_path, fake_vllm, dummy_model, GPUS="1", FAKE_GPU=TWO_H200.split(";")[0])
    p = _run("grid_decode.sh", run, env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert server_starts() == 2
    merged = run / "grid-decode" / "vllm_sweep"
    pts = grid.grid_points(merged, "ttft:2000 tpot:15")
    assert len(pts) == 5
    recorded = {x.knob: x for x in grid.grid_points(rec / "vllm_sweep", "ttft:2000 tpot:15")}
    for x in pts:  # the carried combos are read back as recorded, not measured again
        if x.knob in recorded:
            assert x.windows[0].score == recorded[x.knob].windows[0].score
    assert (part / "sweep-3.log").exists()
    tim = json.loads((part / "timing.json").read_text())
    assert len(tim["calls"]) == len(json.loads((rec / "timing.json").read_text())["calls"]) + 1


def test_case_runs_the_loop_then_its_grid_and_packs_both(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    """tools/gpu/case.sh: one table row per call. The loop from the preset's defaults, then
    the grid over the same candidates compared with it, each folder packed for the call's
    $OUT; a second call resumes both and serves nothing again."""
    run, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    small = "--input-len 16 --output-len 8 --num-prompts 12 --rate 100 --prefix-len 8"
    env = _env(tmp_path, fake_vllm, dummy_model, PREFIX_LEN="8", TUNE_EXTRA=small,
               LOOP_S="300", CALL_S="600", OUT=str(out))
    proc = subprocess.Popen(["bash", str(ROOT / "tools" / "gpu" / "case.sh"), "prefix", str(run)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # the loop is packed before the grid starts: a call cut during the grid still returns it
    packed_before_grid = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if (run / "grid-prefix").exists():
            packed_before_grid = (out / "prefix.tgz").exists()
            break
        time.sleep(0.05)
    stdout, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout
    assert packed_before_grid is True
    steps = [json.loads(x) for x in (run / "prefix" / "tune.jsonl").read_text().splitlines()]
    summary = steps[-1]
    assert steps[0]["kind"] == "baseline" and summary["kind"] == "summary"
    assert summary["outcome"]["outcome"] in ("meets_slo", "past_knee")
    cmp = json.loads((run / "grid-prefix" / "compare.json").read_text())
    assert cmp["grid"]["combos_planned"] == ["defaults", "enable_prefix_caching=False"]
    assert cmp["loop"]["dir"] == str(run / "prefix")
    starts = server_starts()
    loop_points = len((run / "prefix" / "points.jsonl").read_text().splitlines())
    assert starts == loop_points + 2  # the loop's points, then the grid's two combos
    assert sorted(f.name for f in out.iterdir()) == [
        "commands.log", "grid-prefix.tgz", "prefix.tgz"]
    with tarfile.open(out / "prefix.tgz") as t:
        assert "prefix/tune.jsonl" in t.getnames()
    log = (run / "commands.log").read_text()
    assert "case.sh prefix loop_rc=0 grid_rc=0" in log
    # a second call: everything is read back, no server starts
    p2 = subprocess.run(["bash", str(ROOT / "tools" / "gpu" / "case.sh"), "prefix", str(run)],
                        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert p2.returncode == 0, p2.stdout + p2.stderr
    assert server_starts() == starts


def test_case_packs_the_grid_after_each_finished_run(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path) -> None:
    """A device call stopped by its own limit during the grid (no final pack) still returns
    the grid runs finished before it: case.sh packs again while the next server starts."""
    run, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    small = "--input-len 16 --output-len 8 --num-prompts 12 --rate 100 --prefix-len 8"
    env = _env(tmp_path, fake_vllm, dummy_model, PREFIX_LEN="8", TUNE_EXTRA=small,
               LOOP_S="300", CALL_S="600", OUT=str(out), FAKE_VLLM_STARTUP_S="3")
    proc = subprocess.Popen(["bash", str(ROOT / "tools" / "gpu" / "case.sh"), "prefix", str(run)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mid = tmp_path / "mid-grid.tgz"  # what a call cut at this moment would have returned
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if (out / "grid-prefix.tgz").exists() and not mid.exists():
            shutil.copy(out / "grid-prefix.tgz", mid)
        time.sleep(0.05)
    stdout, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout
    assert "case.sh prefix: packed after 1 finished combo(s)" in stdout, stdout
    assert "packed after 1 finished combo(s)" in (run / "commands.log").read_text()
    with tarfile.open(mid) as t:
        names = t.getnames()
    # the first combo, whole (its run, gridrun bench's harness file, the sweep's summary); the
    # second still to come
    done = [n.rsplit("/", 1)[0] for n in names if n.endswith("/summary.json") and "SERVE-" in n]
    assert len(done) == 1, names
    assert {f"{done[0]}/{f}" for f in ("run=0.json", "run=0.harness.json")} <= set(names)
    assert len([n for n in names if n.endswith("/run=0.json")]) == 1
    assert not (run / ".packer-stop").exists()
    with tarfile.open(out / "grid-prefix.tgz") as t:  # the final pack holds both
        assert len([n for n in t.getnames() if n.endswith("/run=0.json")]) == 2


def test_case_runs_a_two_knob_side_by_side_under_its_own_name(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    """CASE names the folders of a preset's variant; GRID "K1=.. x K2=.." makes vLLM's grid
    every pair, vLLM's defaults (1024 x 8192 on a large GPU) spelled out among them and not
    served twice. The comparison finds the loop's configurations in that grid although the
    loop leaves the defaults unset (grid.json's GPU size gives them)."""
    run, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    small = ("--input-len 16 --output-len 8 --num-prompts 12 --rate 100 "
             "--candidate max_num_seqs=128 --candidate max_num_batched_tokens=4096")
    env = _env(tmp_path, fake_vllm, dummy_model, CASE="sbs", TUNE_EXTRA=small, LOOP_S="300",
               CALL_S="600", OUT=str(out),
               GRID="max_num_seqs=128,1024 x max_num_batched_tokens=4096,8192")
    p = subprocess.run(["bash", str(ROOT / "tools" / "gpu" / "case.sh"), "knee", str(run)],
                       env=env, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in out.iterdir()) == ["commands.log", "grid-sbs.tgz", "sbs.tgz"]
    meta = json.loads((run / "grid-sbs" / "grid.json").read_text())
    assert meta["gpu_memory_gib"] == 140.0 and len(meta["combos"]) == 4
    assert {"max_num_seqs": 1024, "max_num_batched_tokens": 8192} in meta["combos"]
    loop_points = len((run / "sbs" / "points.jsonl").read_text().splitlines())
    assert server_starts() == loop_points + 4
    cmp = json.loads((run / "grid-sbs" / "compare.json").read_text())
    defaults = "max_num_seqs=1024, max_num_batched_tokens=8192"
    assert defaults in cmp["cross_spread"]  # the loop's baseline, found in the grid
    assert cmp["loop_pick_in_grid"] is not None
    kept = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, **cmp["loop"]["knobs"]}
    assert cmp["loop_pick_in_grid"]["knobs"] == {**kept, "max_model_len": 4096}
    # without the GPU size (an older grid.json) only identical spellings match
    from course_utils.lab.grid import same_config

    assert not same_config({})({"max_model_len": 4096}, {"max_model_len": 4096, **{
        "max_num_seqs": 1024, "max_num_batched_tokens": 8192}})
    assert same_config(meta)({"max_model_len": 4096}, {"max_model_len": 4096, **{
        "max_num_seqs": 1024, "max_num_batched_tokens": 8192}})
    assert not same_config(meta)({"max_model_len": 4096}, {"max_model_len": 4096,
                                                          "max_num_seqs": 128})


def test_case_spends_nothing_when_the_preflight_refuses(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    run = tmp_path / "run"
    env = _env(tmp_path, fake_vllm, dummy_model, MODEL=str(tmp_path / "no-model"))
    p = subprocess.run(["bash", str(ROOT / "tools" / "gpu" / "case.sh"), "prefix", str(run)],
                       env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert server_starts() == 0 and not (run / "grid-prefix").exists()
    assert "case.sh prefix: preflight failed, nothing run" in (run / "commands.log").read_text()


def test_side_by_side_keeps_vllms_own_warm_up_as_an_option(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path) -> None:
    run = tmp_path / "run"
    env = _env(tmp_path, fake_vllm, dummy_model, WARMUP="num:8", GRID="max_num_seqs=64,128",
               SLO_SPEC="ttft:300 tpot:50", GPU_SIZE="4090", FAKE_GPU="")
    env.pop("FAKE_GPU")
    p = _run("side_by_side.sh", run, env)
    assert p.returncode == 0, p.stdout + p.stderr
    meta = json.loads((run / "sidebyside" / "grid.json").read_text())
    assert meta["warmup"] == {"kind": "vllm --num-warmups", "n": 8}
    bench = (run / "sidebyside" / "bench_cmd.txt").read_text()
    assert "--num-warmups 8" in bench and "gridrun" not in bench
    # in the grid's order (grid.json), not the folders'
    assert [x.knob for x in grid.grid_points(run / "sidebyside" / "vllm_sweep",
                                             "ttft:300 tpot:50")] == ["max_num_seqs=64",
                                                                      "max_num_seqs=128"]


def test_a_rejected_grid_run_is_measured_again_on_resume(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
        server_starts) -> None:
    """A combo whose only run the gate rejected (a JIT compile in its window) is not kept:
    the next call moves it to rejected/ and vLLM's --resume serves and measures it again;
    a valid combo is not touched."""
    run = tmp_path / "run"
    sbs = run / "sidebyside"
    env = _env(tmp_path, fake_vllm, dummy_model, GRID="max_num_seqs=64", FAKE_VLLM_JIT_AT="24",
               RATE="20", SLO_SPEC="ttft:300 tpot:50", GPU_SIZE="4090")
    env.pop("FAKE_GPU")
    assert _run("side_by_side.sh", run, env).returncode == 0
    (pt,) = grid.grid_points(sbs / "vllm_sweep", "ttft:300 tpot:50")
    assert not pt.valid and server_starts() == 1
    env.pop("FAKE_VLLM_JIT_AT")
    p = _run("side_by_side.sh", run, env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert server_starts() == 2  # served again
    (again,) = grid.grid_points(sbs / "vllm_sweep", "ttft:300 tpot:50")
    assert again.valid and again.knob == pt.knob
    kept = sbs / "rejected" / f"{pt.key}-1"
    assert (kept / "run=0.json").is_file()  # the rejected run stays on disk as evidence
    assert "reopen: max_num_seqs=64 had no valid run" in (sbs / "commands.log").read_text()
    # a third call: everything valid, nothing reopened, no server
    assert _run("side_by_side.sh", run, env).returncode == 0
    assert server_starts() == 2 and not (sbs / "rejected" / f"{pt.key}-2").exists()
    # nothing measured yet: nothing to reopen
    assert gridrun.main(["reopen", str(tmp_path / "empty")]) == 0


def test_a_jit_compile_inside_a_grid_run_makes_it_invalid(
        tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path) -> None:
    """The fake server logs vLLM's JIT-monitor line at its 24th completion: after the 16
    warm-up requests, inside the measured run (the sweep's log has the server's output)."""
    run = tmp_path / "run"
    env = _env(tmp_path, fake_vllm, dummy_model, GRID="max_num_seqs=64", FAKE_VLLM_JIT_AT="24",
               RATE="20",
               SLO_SPEC="ttft:300 tpot:50", GPU_SIZE="4090")
    env.pop("FAKE_GPU")
    p = _run("side_by_side.sh", run, env)
    assert p.returncode == 0, p.stdout + p.stderr
    (pt,) = grid.grid_points(run / "sidebyside" / "vllm_sweep", "ttft:300 tpot:50")
    (w,) = pt.windows
    assert not w.valid and w.validity_issues[-1].startswith("vLLM JIT-compiled 1 kernel(s)")
    # the harness alone (no server log) did not see it
    h = json.loads((run / "sidebyside" / "vllm_sweep" / "grid" / pt.key / "run=0.harness.json")
                   .read_text())
    assert h["valid"] is True


@pytest.mark.parametrize("name", ["prefix", "knee", "prefill"])
def test_a_presets_grid_starts_where_the_loop_starts(tmp_path: Path, name: str) -> None:
    """Every preset's grid includes vLLM's defaults (the loop's baseline), one knob or two."""
    pre = presets.get(name, "h200")
    (tmp_path / "gpu.json").write_text(json.dumps(H200_CUDA))  # a rehearsal reads no GPU here
    assert gridrun.main(["prepare", str(tmp_path), "--model", "m", "--port", "1",
                         "--preset", name, "--gpu", "h200"]) == 0
    params = json.loads((tmp_path / "serve_params.json").read_text())
    assert params[0] == {"_benchmark_name": "defaults"}
    assert len(params) == 1 + sum(len(v) for v in pre.candidates.values())
    assert (tmp_path / "rehearsal.json").is_file() == bool(pre.rehearse)


H200_CUDA = {"total": int(139.8 * 2**30), "free": int(139.0 * 2**30), "name": "NVIDIA H200"}


def test_a_rehearsed_presets_grid_runs_the_targets_budget_like_the_loop(tmp_path: Path) -> None:
    """The kv preset rehearses a 4090 on the H200: the grid's base is the 4090's budget and
    serve defaults, and its swept utilisation is scaled, exactly as the loop's
    ``--rehearse-gpu`` does (one rule, lab.rehearsal)."""
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "gpu.json").write_text(json.dumps(H200_CUDA))
    assert gridrun.main(["prepare", str(tmp_path / "g"), "--model", "m", "--port", "1",
                         "--preset", "kv", "--gpu", "h200"]) == 0
    r = rehearsal.load(tmp_path / "g")
    assert r is not None and r.target == "RTX 4090" and r.max_num_seqs == 256
    params = json.loads((tmp_path / "g" / "serve_params.json").read_text())
    serve = (tmp_path / "g" / "serve_cmd.txt").read_text()
    assert f"--gpu-memory-utilization {r.util_here}" in serve
    assert "--max-num-seqs 256" in serve and "--max-num-batched-tokens 2048" in serve
    assert {"gpu_memory_utilization": r.scale(0.95)} in params
    assert {"kv_cache_dtype": "fp8"} in params
    # the loop's side of the same preset
    ap = argparse.ArgumentParser()
    cli.add_cli(ap.add_subparsers(dest="cmd"))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "gpu.json").write_text(json.dumps(H200_CUDA))
    a = ap.parse_args(["tune", "--model", "m", "--out", str(tmp_path / "t"), "--preset", "kv",
                       "--gpu", "h200"])
    cli._apply_preset(a, tune=True)
    assert a.rehearse_gpu == "rtx4090"
    base, cand = cli._rehearse(a, cli.parse_assign(a.base, False),
                               cli.parse_assign(a.candidate, True))
    assert base["gpu_memory_utilization"] == r.util_here and base["max_num_seqs"] == 256
    assert cand["gpu_memory_utilization"] == [r.scale(0.95)]


def test_prepare_fails_in_one_line_without_a_workload(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert gridrun.main(["prepare", str(tmp_path), "--model", "m", "--port", "1", "--rate",
                         "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no workload → fix: give --preset") and err.count("\n") == 1
    assert gridrun.main(["prepare", str(tmp_path), "--model", "m", "--port", "1",
                      "--preset", "nope"]) == 2
    assert "no preset 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- replay


def test_replay_of_the_recorded_fake_grid_rederives_best_and_ratio() -> None:
    rec = json.loads((FIX / "compare.json").read_text())
    cmp = compare(FIX / "vllm_sweep", DECODE12, rec["slo"])
    pts = grid.grid_points(FIX / "vllm_sweep", rec["slo"])
    best = best_point(pts, objective="request_goodput")
    assert best is not None and cmp["grid"]["best"]["label"] == best.knob
    # from the per-combo run files as vLLM wrote them
    raw = {x.knob: json.loads((FIX / "vllm_sweep" / "grid" / x.key / "run=0.json").read_text())
           for x in pts}
    top = max(raw, key=lambda k: raw[k]["request_goodput"])
    assert top == best.knob
    pick = raw["defaults"]["request_goodput"]
    assert cmp["ratios"]["pick_in_grid_over_grid_best"] == pytest.approx(
        pick / raw[top]["request_goodput"], abs=0.001)
    assert cmp["ratios"] == rec["ratios"] and cmp["verdict"] == rec["verdict"]
    # the loop side is the recorded decode12 run under today's rules: vLLM's defaults
    assert cmp["loop"]["knobs"] == {"max_model_len": 4096}
    assert cmp["loop"]["score"] == pytest.approx(1.605, abs=0.01)


def _grid_copy(tmp_path: Path, goodputs: dict[str, float]) -> Path:
    shutil.copytree(FIX, tmp_path / "g")  # grid.json (the base knobs) with it
    d = tmp_path / "g" / "vllm_sweep"
    for x in grid.grid_points(d, "ttft:2000 tpot:15"):
        f = d / "grid" / x.key / "run=0.json"
        raw = json.loads(f.read_text())
        raw["request_goodput"] = goodputs[x.knob]
        f.write_text(json.dumps(raw))
    return d


@pytest.mark.parametrize(("mns128", "decision"), [
    (1.60, "same"),           # the defaults are the grid's best too
    (1.62, "tie"),            # +1.3 %: inside the 2 % plateau
    (1.80, "grid_better"),    # +12.5 %: beyond plateau and spread
])
def test_ties_are_called_ties(tmp_path: Path, mns128: float, decision: str) -> None:
    g = {"defaults": 1.60, "max_num_batched_tokens=2048": 1.55,
         "max_num_batched_tokens=4096": 1.50, "max_num_seqs=128": mns128,
         "max_num_seqs=256": 1.58}
    if decision == "same":
        g["max_num_seqs=128"] = 1.59
    cmp = compare(_grid_copy(tmp_path, g), DECODE12, "ttft:2000 tpot:15")
    assert cmp["verdict"]["decision"] == decision, cmp["verdict"]
    from course_utils.core.texts import loop_vs_grid

    words = {"same": ("picked the grid's best", "正是网格里最好的"),
             "tie": ("A tie", "打平"), "grid_better": ("beats the loop's pick", "网格更好")}
    for lang, word in zip(("en", "zh"), words[decision], strict=True):
        assert word in loop_vs_grid(cmp, lang)


def test_an_invalid_grid_run_does_not_count(tmp_path: Path) -> None:
    d = _grid_copy(tmp_path, {"defaults": 1.60, "max_num_batched_tokens=2048": 1.55,
                              "max_num_batched_tokens=4096": 1.50, "max_num_seqs=128": 9.0,
                              "max_num_seqs=256": 1.58})
    h = d / "grid" / "SERVE--max_num_seqs=128" / "run=0.harness.json"
    rec = json.loads(h.read_text())
    rec.update(valid=False, validity_issues=[
        "the warm-up ran at most 70 requests at once, the window 130: the load's batch "
        "sizes were not warmed up"])
    h.write_text(json.dumps(rec))
    cmp = compare(d, DECODE12, "ttft:2000 tpot:15")
    assert cmp["grid"]["best"]["label"] == "defaults" and cmp["verdict"]["decision"] == "same"
    from course_utils.core.texts import loop_vs_grid

    assert "热身最多只有 70 个请求同时在跑，测量窗口到了 130 个" in loop_vs_grid(cmp, "zh")

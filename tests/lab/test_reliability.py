"""A score always belongs to its SLO, and nothing a run finished is overwritten (fake vLLM).

- The same folder under two SLOs answers what a fresh folder answers under the second one;
  the finished points are re-scored from their saved bench JSON (per-request lists), not
  measured again, and each new record says so and carries its SLO.
- A torn last line: its point is measured again into a fresh folder, the earlier attempt's
  files keep their bytes under a new name; tune.jsonl of an earlier experiment is kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from course_utils.core.records import Workload
from course_utils.core.slo import SLO
from course_utils.core.validate import BadInput
from course_utils.lab.sweep import load_points, sweep
from course_utils.lab.tune import tune

W = Workload(input_len=16, output_len=24, num_prompts=16)
FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
            bench_kwargs={"timeout_s": 60}, warmup_prompts=2, metrics_interval_s=0.05,
            gpu_memory_gib=24.0, progress=False)
STRICT = SLO.parse("ttft:5000 tpot:0.001")  # no batch width meets it
LOOSE = SLO.parse("ttft:5000 tpot:1000")


def _starts(tmp_path: Path) -> int:
    p = tmp_path / "starts.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def _digests(d: Path) -> set[str]:
    """The content of every file under ``d`` (bytes, wherever they now live); points.jsonl,
    only ever appended to, is checked as a prefix instead."""
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in d.rglob("*")
            if p.is_file() and p.name != "points.jsonl"}


def _loop(out: Path, slo: SLO) -> dict:
    return tune("fake-model", {"max_num_seqs": [2, 16]}, workload=W, slo=slo, out_dir=out,
                base_knobs={"max_num_seqs": 4}, max_steps=2, plateau=100.0, **FAST)


def test_a_changed_slo_is_rescored_and_answers_as_a_fresh_folder(tmp_path: Path,
                                                                  fake_vllm: Path) -> None:
    same, fresh = tmp_path / "same", tmp_path / "fresh"
    first = _loop(same, STRICT)
    assert first["meets_slo"] is False
    kept = _digests(same)
    strict_lines = (same / "points.jsonl").read_bytes()
    n = _starts(tmp_path)
    second = _loop(same, LOOSE)
    rescored_starts = _starts(tmp_path) - n
    third = _loop(fresh, LOOSE)
    for k in ("meets_slo", "knobs", "next_knob"):
        assert second[k] == third[k], k
    assert second["meets_slo"] is True
    assert second["outcome"]["outcome"] == third["outcome"]["outcome"]
    # the earlier SLO's records and files are all still there, byte for byte
    assert (same / "points.jsonl").read_bytes().startswith(strict_lines)
    assert kept <= _digests(same)
    # the second SLO's answer came from re-scoring, and every record says under which SLO
    assert rescored_starts < _starts(tmp_path) - n - rescored_starts  # fewer than fresh
    recs = load_points(same)
    loose = [r for r in recs if r["slo"] == str(LOOSE)]
    assert loose and all(r["slo"] in (str(STRICT), str(LOOSE)) for r in recs)
    again = [r for r in loose if "rescored" in r]
    assert again and all(r["rescored"]["from_slo"] == str(STRICT) for r in again)
    assert all(r["score"]["meets_slo"] for r in again)
    # tune.jsonl of the first experiment is kept under a new name
    assert (same / "tune.1.jsonl").is_file()
    assert json.loads((same / "tune.1.jsonl").read_text().splitlines()[-1])["meets_slo"] is False


def test_a_torn_point_is_measured_again_without_touching_its_earlier_files(
        tmp_path: Path, fake_vllm: Path) -> None:
    out = tmp_path / "out"
    sweep("fake-model", "max_num_seqs", [2], workload=W, slo=LOOSE, out_dir=out,
          early_stop=False, **FAST)
    pts = out / "points.jsonl"
    whole = pts.read_bytes()
    pts.write_bytes(whole[: len(whole) // 2])  # killed while writing its record
    before = _digests(out / "points")
    recs = sweep("fake-model", "max_num_seqs", [2], workload=W, slo=LOOSE, out_dir=out,
                 early_stop=False, **FAST)
    assert [r["status"] for r in recs] == ["ok"]
    assert before <= _digests(out / "points")  # the earlier attempt's files, unchanged
    assert len(list((out / "points").iterdir())) == 2  # <key> and <key>.1
    assert (out / "points.jsonl.torn").read_bytes() == whole[: len(whole) // 2] + b"\n"
    assert len(load_points(out)) == 1  # only whole records in points.jsonl


def test_no_resume_refuses_a_finished_folder(tmp_path: Path, fake_vllm: Path) -> None:
    out = tmp_path / "out"
    sweep("fake-model", "max_num_seqs", [2], workload=W, slo=LOOSE, out_dir=out, **FAST)
    before = _digests(out)
    n = _starts(tmp_path)
    with pytest.raises(BadInput, match="--no-resume"):
        sweep("fake-model", "max_num_seqs", [2], workload=W, slo=LOOSE, out_dir=out,
              resume=False, **FAST)
    with pytest.raises(BadInput, match="--no-resume"):
        tune("fake-model", {"max_num_seqs": [2]}, workload=W, slo=LOOSE, out_dir=out,
             resume=False, **FAST)
    assert _starts(tmp_path) == n and _digests(out) == before


@pytest.mark.parametrize("name", ["points.jsonl", "tune.jsonl", "knee.jsonl", "gpu.json"])
def test_preflight_catches_a_folder_in_place_of_a_file(tmp_path: Path, name: str) -> None:
    from course_utils.lab import preflight as pf

    (tmp_path / name).mkdir()
    check = pf.check_recorded(tmp_path)
    assert not check.ok and name in check.line("en") and "→" in check.line("en")
    assert pf.check_recorded(tmp_path / "new").ok  # a folder not made yet holds nothing


def test_knee_verb_measures_again_under_another_slo(tmp_path: Path, fake_vllm: Path,
                                                    fake_nvidia_smi: Path, dummy_model: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from course_utils.__main__ import main

    out = tmp_path / "k"
    argv = ["knee", "--model", str(dummy_model), "--load-format", "dummy", "--rates", "400",
            "--out", str(out), "--input-len", "16", "--output-len", "8", "--num-prompts", "8",
            "--bracket-repeats", "0", "--startup-timeout", "20", "--gpu-memory-gib", "24",
            "--no-progress"]
    assert main([*argv, "--slo", "ttft:5000 tpot:1000"]) == 0
    grown = {p: p.read_bytes() for p in (out / "knee.jsonl", out / "knee" / "serve.log")}
    first = _digests(out) - {hashlib.sha256(b).hexdigest() for b in grown.values()}
    assert main([*argv, "--slo", "ttft:4000 tpot:900"]) == 0
    assert all(p.read_bytes().startswith(b) for p, b in grown.items())  # appended to only
    recs = [json.loads(x) for x in (out / "knee.jsonl").read_text().splitlines()]
    assert [r["slo"] for r in recs] == ["ttft:5000 tpot:1000", "ttft:4000 tpot:900"]
    assert (out / "knee" / "rate-400.1").is_dir()  # the first SLO's files, kept
    assert first <= _digests(out)
    assert "knee_rate" in capsys.readouterr().out


def test_a_lab_stops_on_a_bad_parameter_with_its_one_line(tmp_path: Path) -> None:
    """One papermill run (the rest of the corpus calls the check directly): the lab's line
    is the error papermill reports, and the output folder is never made."""
    import papermill as pm

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "lab02"
    with pytest.raises(pm.PapermillExecutionError) as exc:
        pm.execute_notebook(str(root / "labs" / "02_slo_loop.ipynb"), str(tmp_path / "o.ipynb"),
                            parameters={"slo": "ttft", "output_dir": str(out)}, progress_bar=False,
                            cwd=str(root))
    lines = [x for x in str(exc.value).splitlines() if x.startswith("error:")]
    assert lines == [lines[0]] and lines[0].startswith("error: -p slo 'ttft'")
    assert exc.value.ename == "BadInput" and not out.exists()


def test_lab01_point_tried_again_keeps_the_earlier_attempt(tmp_path: Path) -> None:
    """A failed lab-01 point retried (retry_failed) gets a fresh folder; the first attempt's
    spec and log keep their bytes under <key>.1."""
    from course_utils.lab import offline

    kw = {"model": "m", "out_dir": tmp_path, "eval_set": "labs/data/small_eval.jsonl",
          "python": ["false"], "timeout_s": 30}
    first = offline.run_point({"gpu_memory_utilization": 0.8}, **kw)
    assert first["status"] == "failed"
    pdir = tmp_path / "points" / first["key"]
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    second = offline.run_point({"gpu_memory_utilization": 0.8}, **kw)
    assert second["key"] == first["key"] and second["status"] == "failed"
    kept = tmp_path / "points" / f"{first['key']}.1"
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == before
    assert pdir.is_dir() and (pdir / "spec.json").is_file()

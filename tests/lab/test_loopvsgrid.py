"""lab.grid's book table: the loop against vLLM's grid, one row per constraint, re-derived from the
recorded folders that labs/results/loop_vs_grid.json names."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from course_utils.__main__ import main as cli_main
from course_utils.core import presets, texts
from course_utils.lab import grid

RESULTS = grid.RESULTS


@pytest.fixture(scope="module")
def rows() -> dict[str, grid.CaseRow]:
    return {r.case: r for r in grid.rows()}


def test_every_preset_has_a_row_and_every_row_a_start(rows: dict[str, grid.CaseRow]) -> None:
    index = json.loads(grid.INDEX.read_text())["cases"]
    assert {c["preset"] for c in index if c.get("preset")} == set(presets.names())
    for c in index:  # a row without a preset is one whose start was handicapped, and says so
        assert c.get("preset") or rows[c["case"]].handicapped_start


def test_decode_row_is_the_whole_grid_and_a_tie(
    rows: dict[str, grid.CaseRow],
) -> None:
    r = rows["decode"]
    assert r.status == "measured" and (r.combos_measured, r.combos_planned) == (5, 5)
    # the grid's numbers are vLLM's own request_goodput of each combo's run file
    sweep = RESULTS / "h200-2026-12-01b/grid-decode/vllm_sweep/grid"
    raw = {
        d.name: json.loads((d / "run=0.json").read_text())["request_goodput"]
        for d in sweep.iterdir()
        if (d / "run=0.json").is_file()
    }
    assert len(raw) == 5
    assert r.defaults == pytest.approx(raw["SERVE--defaults"], abs=1e-9)
    assert r.grid_best == pytest.approx(max(raw.values()), abs=1e-9)
    assert r.grid_best_label == "max_num_seqs=256"
    assert r.loop == pytest.approx(1.606, abs=0.01) and r.loop_knobs == {"max_model_len": 4096}
    # the loop's own measurement is higher, but one config differs by 34 % between servers
    assert r.loop_over_grid_best == pytest.approx(1.082, abs=0.001)
    assert r.cross_spread == pytest.approx(0.344, abs=0.001)
    assert r.verdict == "tie" and r.outcome == "past_knee"


def test_handicapped_row_is_marked_and_gains_nothing_against_the_defaults(
    rows: dict[str, grid.CaseRow],
) -> None:
    r = rows["queue_cap"]
    assert r.status == "measured" and r.handicapped_start == "max_num_seqs=64"
    assert r.defaults is not None and r.loop is not None
    assert abs(r.loop / r.defaults - 1) < 0.01  # against vLLM's defaults: nothing
    assert r.verdict == "tie" and r.outcome == "meets_slo"
    en = grid.case_table([r], "en")
    assert "a handicap" in en and "proves no constraint" in en


def test_rows_without_a_recorded_side_carry_no_numbers(tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"cases": [{"case": "kv", "preset": "kv"}]}))
    (r,) = grid.rows(index, RESULTS)
    assert r.status == "not_run" and r.workload is not None
    assert (r.defaults, r.loop, r.grid_best, r.verdict, r.outcome) == (None,) * 5
    assert "not run yet" in grid.case_table([r], "en")
    assert "尚未运行" in grid.case_table([r], "zh")


def test_kv_row_the_loop_found_fp8_on_a_slower_server(
    rows: dict[str, grid.CaseRow],
) -> None:
    """The kv case (rehearsed RTX 4090): both sides end on fp8 KV; the loop's server of it was
    slower on the same requests, so the grid's run scores higher."""
    r = rows["kv"]
    assert r.status == "measured" and (r.combos_measured, r.combos_planned) == (3, 3)
    assert r.loop_knobs["kv_cache_dtype"] == "fp8" and r.grid_best_label == "kv_cache_dtype=fp8"
    assert r.loop == pytest.approx(7.44, abs=0.01) and r.grid_best == pytest.approx(12.15, abs=0.01)
    assert r.loop_over_grid_best == pytest.approx(0.612, abs=0.001)
    assert r.verdict == "grid_better" and r.outcome == "past_knee"
    # gpu_memory_utilization 0.160643 was measured by both sides: 6.1 % apart
    assert r.cross_spread == pytest.approx(0.061, abs=0.001)
    run = RESULTS / "h200-2026-12-02"
    loop_fp8 = json.loads((run / "kv/points/4f56b095e5997afc/bench.json").read_text())
    grid_fp8 = json.loads(
        (run / "grid-kv/vllm_sweep/grid/SERVE--kv_cache_dtype=fp8/run=0.json").read_text()
    )
    # the same requests at the same times (seed 0), answered more slowly by the loop's server
    def offsets(b: dict[str, list[float]]) -> list[float]:
        return [t - b["start_times"][0] for t in b["start_times"]]

    assert offsets(loop_fp8) == pytest.approx(offsets(grid_fp8), abs=0.01)
    assert loop_fp8["mean_tpot_ms"] > 1.3 * grid_fp8["mean_tpot_ms"]


def test_an_unfinished_loop_gets_no_verdict_against_the_grid(
    rows: dict[str, grid.CaseRow], tmp_path: Path
) -> None:
    """The kv loop as it stood after its first call: its baseline only, stopped on the budget."""
    res, kv = tmp_path / "results", tmp_path / "results/h200-2026-12-02/kv"
    shutil.copytree(RESULTS / "h200-2026-12-02/grid-kv", res / "h200-2026-12-02/grid-kv")
    kv.mkdir()
    src = RESULTS / "h200-2026-12-02/kv"
    (kv / "points.jsonl").write_text((src / "points.jsonl").read_text().splitlines()[0] + "\n")
    shutil.copy(src / "tune.4.jsonl", kv / "tune.jsonl")
    case = next(c for c in json.loads(grid.INDEX.read_text())["cases"] if c["case"] == "kv")
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"cases": [case]}))
    (r,) = grid.rows(index, res)
    assert r.status == "measured" and r.outcome == "unfinished"
    assert r.verdict == "loop_unfinished" and r.grid_best_label == "kv_cache_dtype=fp8"
    assert r.loop is not None and r.grid_best is not None and r.loop < r.grid_best
    assert "none yet: the loop is unfinished" in grid.case_table([r], "en")
    assert "暂无：闭环没跑完" in grid.case_table([r], "zh")


def test_partial_grids_stay_partial_and_count_only_valid_combos(tmp_path: Path) -> None:
    """The earlier session's grids, as recorded there: prefix with its caching-off run
    rejected by the warm-up rule, the knee with 2 of its 3 combos."""
    cases = {c["case"]: dict(c) for c in json.loads(grid.INDEX.read_text())["cases"]}
    cases["prefix"]["grid"] = "h200-2026-12-01b/grid-prefix/vllm_sweep"
    cases["knee"]["grid"] = "h200-2026-12-01b/grid-knee/vllm_sweep"
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"cases": [cases["prefix"], cases["knee"]]}))
    p, k = grid.rows(index, RESULTS)
    # caching off was measured, but its window failed the warm-up coverage rule: not counted
    assert p.status == "partial" and (p.combos_measured, p.combos_planned) == (1, 2)
    assert p.grid_best_label == "defaults" and p.outcome == "meets_slo"
    assert p.loop == pytest.approx(14.49, abs=0.01) and p.verdict == "same"
    assert k.status == "partial" and (k.combos_measured, k.combos_planned) == (2, 3)
    assert k.outcome == "past_knee" and k.verdict == "tie"
    assert k.cross_spread is not None and k.cross_spread > 1.0  # 149 % between servers


def test_a_grid_that_loses_a_combo_turns_its_row_partial(tmp_path: Path) -> None:
    """The status is read from the folders: the same case with one combo removed is partial."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS / "h200-2026-11-29c", res / "h200-2026-11-29c")
    index = tmp_path / "index.json"
    case = next(
        c for c in json.loads(grid.INDEX.read_text())["cases"] if c["case"] == "queue_cap"
    )
    index.write_text(json.dumps({"cases": [case]}))
    assert grid.rows(index, res)[0].status == "measured"
    sweep = res / "h200-2026-11-29c/sidebyside/vllm_sweep"
    combo = next(d for d in sweep.rglob("SERVE-*") if "max_num_seqs=64" in str(d) and d.is_dir())
    shutil.rmtree(combo)
    (r,) = grid.rows(index, res)
    assert r.status == "partial" and r.combos_measured == 2


def test_table_in_both_languages(rows: dict[str, grid.CaseRow]) -> None:
    rs = list(rows.values())
    en, zh = grid.case_table(rs, "en"), grid.case_table(rs, "zh")
    assert en.count("\n| ") == zh.count("\n| ") == len(rs)  # after the header
    assert "the grid is better" in en
    assert "not run" not in zh
    # zh cells hold Chinese, code and numbers, not English prose
    body = re.sub(r"`[^`]*`", "", zh)
    assert not re.search(r"\b(?:the|loop|grid|tie|partial|measured)\b", body)
    with pytest.raises(ValueError, match="lang"):
        texts.constraint_table([], "fr")


def test_cli_prints_the_table_and_fails_in_one_line_on_a_missing_folder(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["grid"]) == 0
    assert "| decode (tight TPOT) |" in capsys.readouterr().out
    bad = tmp_path / "index.json"
    bad.write_text(
        json.dumps(
            {"cases": [{"case": "decode", "preset": "decode", "grid": "nowhere/vllm_sweep"}]}
        )
    )
    assert cli_main(["grid", "--index", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nowhere" in err[0]


@pytest.mark.parametrize(("run", "outcome"), [
    ("h200-2026-11-29/slo", "unfinished"),     # the GPU budget stopped it, SLO missed
    ("h200-2026-11-29c/slo", "meets_slo"),
    ("h200-2026-11-30/decode", "meets_slo"),   # 6 req/s: nothing binds
    ("h200-2026-11-30/decode12", "past_knee"),  # 12 req/s: no knob swept met TPOT 15 ms
    ("h200-2026-12-01b/prefix", "meets_slo"),   # caching on: nothing binds
    ("h200-2026-12-01b/knee", "past_knee"),     # 80 req/s: 8 % of the offered rate
])
def test_every_recorded_loop_replays_to_its_ending(run: str, outcome: str) -> None:
    from course_utils.lab.replay import replay_tune, tune_summary

    o = replay_tune(RESULTS / run)["outcome"]
    assert o["outcome"] == outcome, o
    summary = tune_summary(RESULTS / run)
    assert summary is not None
    # the runs recorded after the rule existed said, live, what the replay says
    assert ("outcome" in summary) == run.startswith("h200-2026-12-01b")
    if "outcome" in summary:  # the same ending (the in-effect rule came after these runs)
        assert summary["outcome"]["outcome"] == o["outcome"]
        assert summary["outcome"]["tried"] == o["tried"]


def test_kv_note_numbers_come_from_the_records() -> None:
    """The kv note's server comparison: TTFT of the first 50 arrivals (seed 0 on both sides),
    the pools vLLM logged, and the activation peak of a cold start against a cached one."""
    import gzip
    import statistics

    run = RESULTS / "h200-2026-12-02"
    grid_runs = run / "grid-kv/vllm_sweep/grid"

    def first50(b: dict) -> float:
        order = sorted(range(len(b["start_times"])), key=lambda i: b["start_times"][i])
        return statistics.median(b["ttfts"][i] for i in order[:50]) * 1000

    loop = {k: json.loads((run / f"kv/points/{k}/bench.json").read_text())
            for k in ("2bbb168f67ce696e", "f9ba8665fb4013b7", "4f56b095e5997afc")}
    grid_ = {c: json.loads((grid_runs / f"SERVE--{c}/run=0.json").read_text())
             for c in ("defaults", "gpu_memory_utilization=0.160643", "kv_cache_dtype=fp8")}
    assert round(first50(loop["4f56b095e5997afc"])) == 87
    assert round(first50(grid_["kv_cache_dtype=fp8"])) == 59
    # the bf16 servers: 58-61 ms on the loop's side, 56 on the grid's ("close")
    assert [round(first50(loop[k])) for k in ("f9ba8665fb4013b7", "2bbb168f67ce696e")] == [58, 61]
    assert [round(first50(grid_[c])) for c in ("gpu_memory_utilization=0.160643", "defaults")] == [
        56, 56]
    fp8_log = gzip.open(run / "kv/points/4f56b095e5997afc/serve.log.gz", "rt").read()
    cold_log = gzip.open(run / "kv/points/2bbb168f67ce696e/serve.log.gz", "rt").read()
    grid_log = gzip.open(run / "grid-kv/sweep-1.log.gz", "rt").read()
    assert "GPU KV cache size: 257,248 tokens" in fp8_log
    assert "GPU KV cache size: 258,880 tokens" in gzip.open(run / "grid-kv/sweep-3.log.gz", "rt").read()
    assert "GPU KV cache size: 115,920 tokens" in cold_log and "1.04 GiB for peak activation" in cold_log
    assert "GPU KV cache size: 130,016 tokens" in grid_log and "0.29 GiB for peak activation" in grid_log

"""Every recorded run under labs/results re-derives what it committed.

Each folder's result (a loop's kept knobs, steps and ending; a grid's comparison with the
loop; each grid combo's validity; the figures the book quotes) is computed again from the raw
records (points, windows, logs, harness files) through the library and must equal what the
run wrote. A new recorded folder is picked up by the globs below; nothing here pins a decimal
that is not re-derived from the records.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from course_utils.core import presets
from course_utils.core.keep import decide
from course_utils.core.records import ServedPoint, read_jsonl, read_text, relative_spread
from course_utils.core.texts import loop_vs_grid
from course_utils.core.vllm_logs import parse_sweep_log
from course_utils.lab import grid
from course_utils.lab.grid import compare
from course_utils.lab.replay import (
    load_points_checked,
    recorded_objective,
    replay_tune,
    tune_summary,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "labs" / "results"
BOOK = ROOT / "book"
RUNS = sorted(d for d in RESULTS.iterdir() if d.is_dir())
LOOPS = sorted(f.parent for f in RESULTS.glob("*/*/tune.jsonl"))
COMPARES = sorted(f for f in RESULTS.glob("*/*/compare.json")
                  if "verdict" in json.loads(f.read_text()))  # the loop-vs-grid form
HARNESS_GRIDS = sorted(g for g in RESULTS.glob("*/*/vllm_sweep")
                       if any(g.glob("grid/*/run=*.harness.json")))
POINT_FILES = sorted(RESULTS.glob("*/*/points.jsonl"))


def _rel(p: Path) -> str:
    return str(p.relative_to(RESULTS))


def _steps(loop: Path) -> list[dict[str, Any]]:
    return [s for s in read_jsonl(loop / "tune.jsonl") if s.get("kind") == "sweep"]


def _points(loop: Path) -> list[ServedPoint]:
    return [ServedPoint.from_json(r) for r in read_jsonl(loop / "points.jsonl")]


def _grid_slo(grid_dir: Path) -> str:
    meta = grid.read_grid_meta(grid_dir) or {}
    if meta.get("slo"):
        return str(meta["slo"])
    return str(json.loads((grid_dir.parent / "compare.json").read_text())["slo"])


def _grid(grid_dir: Path) -> dict[str, ServedPoint]:
    return {p.knob: p for p in grid.grid_points(grid_dir, _grid_slo(grid_dir))}


def _goodput(p: ServedPoint, i: int = 0) -> float:
    score = p.windows[i].score
    assert score is not None
    return score.request_goodput


def _field_notes(lang: str) -> str:
    return (BOOK / lang / "field-notes.md").read_text(encoding="utf-8")


def _pct(x: float, lang: str, fmt: str = ".0%") -> str:
    """A share as the pages write it: "82 %" in English, "82%" in Chinese."""
    return f"{x:{fmt}}".replace("%", " %" if lang == "en" else "%")


# ----------------------------------------------------------------- every folder, re-derived


@pytest.mark.parametrize("loop", LOOPS, ids=_rel)
def test_a_loop_replays_to_the_knobs_steps_and_ending_it_recorded(loop: Path) -> None:
    summary = tune_summary(loop)
    if summary is None:  # interrupted in its baseline: no record, nothing decided
        assert not _steps(loop) and not (loop / "points.jsonl").exists()
        with pytest.raises(ValueError, match="no baseline step"):
            replay_tune(loop)
        (point,) = (loop / "points").iterdir()  # the one window it finished is whole
        first = json.loads((point / "bench.json").read_text())
        assert first["completed"] == first["num_prompts"] and first["failed"] == 0
        return
    r = replay_tune(loop, objective=recorded_objective(loop))
    assert r["diverged"] is None
    assert r["knobs"] == summary["knobs"]
    steps = _steps(loop)
    assert [s["knob"] for s in r["steps"][1:]] == [s["knob"] for s in steps]
    for got, rec in zip(r["steps"][1:], steps, strict=True):
        assert got["kept"] == rec["kept"] and got["knobs"] == rec["knobs_after"], rec["knob"]
    live = summary.get("outcome")
    if live is not None:  # recorded since loops name their ending
        o = r["outcome"]
        assert {k: o[k] for k in ("outcome", "goodput_share", "tried")} == {
            k: live[k] for k in ("outcome", "goodput_share", "tried")}
        # a knob the leaf names that vLLM already has on is "in effect", not "untried"; a
        # run recorded before that rule listed it as untried
        assert set(o["untried"]) | set(o.get("in_effect", [])) == (
            set(live["untried"]) | set(live.get("in_effect", [])))
    written = loop / "tune-summary.json"
    if written.is_file() and written.read_text().strip():  # the command's own output
        assert json.loads(written.read_text())["knobs"] == summary["knobs"]


@pytest.mark.parametrize("path", COMPARES, ids=_rel)
def test_a_grid_comparison_is_what_the_library_computes_from_both_sides(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = json.loads(path.read_text())
    monkeypatch.chdir(ROOT)  # the files name both sides relative to the repository
    got = compare(rec["grid"]["dir"], rec["loop"]["dir"], rec["slo"],
                  plateau=rec["plateau"], objective=rec["objective"])
    assert json.loads(json.dumps(got)) == rec
    # the report counts only the combos that passed the validity rule as measured
    g = got["grid"]
    valid = sum(1 for c in g["combos"] if c["valid_runs"])
    en, zh = loop_vs_grid(got, "en"), loop_vs_grid(got, "zh")
    assert "=None" not in en and "=None" not in got["verdict"]["why"]
    if valid < len(g["combos_planned"]):
        assert f"measured {valid} of its {len(g['combos_planned'])} combos" in en
        assert f"{len(g['combos_planned'])} 个组合中的 {valid} 个" in zh


@pytest.mark.parametrize("grid_dir", HARNESS_GRIDS, ids=_rel)
def test_each_grid_combo_is_judged_as_the_harness_judged_it_live(grid_dir: Path) -> None:
    """Validity re-checked from the recorded series equals the gate's live decision, which is
    the warm-up rule (the warm-up reached 80 % of the window's running peak); a counted
    window compiled nothing."""
    for label, p in _grid(grid_dir).items():
        (f,) = grid_dir.glob(f"grid/SERVE--{label}/run=0.harness.json")
        h = json.loads(f.read_text())
        warm, run = h["warmup"], h["run"]
        assert warm.get("mode") == run.get("mode")  # the warm-up ran the way the load ran
        assert p.valid == h["valid"] == (warm["running_max"] >= 0.8 * run["running_max"]), label
        if p.valid:
            (w,) = p.windows
            assert w.validity_issues == [] and w.jit == []
        else:
            assert h["validity_issues"][0].startswith("the warm-up ran at most")


def _resumed_pairs() -> list[tuple[Path, Path]]:
    """(earlier, later): the same grid folder in consecutive sessions, the later resumed."""
    by_name: dict[str, list[Path]] = {}
    for g in HARNESS_GRIDS:
        by_name.setdefault(g.parent.name, []).append(g.parent)
    return [(a, b) for runs in by_name.values() for a, b in zip(runs, runs[1:], strict=False)]


@pytest.mark.parametrize(("earlier", "later"), _resumed_pairs(), ids=_rel)
def test_a_resumed_grid_reads_back_the_earlier_runs_and_serves_only_the_rest(
        earlier: Path, later: Path) -> None:
    before, after = _grid(earlier / "vllm_sweep"), _grid(later / "vllm_sweep")
    assert list(after)[:len(before)] == list(before)
    reopened = {d.name for d in (later / "rejected").glob("SERVE--*")}
    for label, p in before.items():
        if p.valid:  # vLLM's --resume read the run back: the same window
            assert after[label].windows[0].score == p.windows[0].score, label
        else:  # `gridrun reopen` kept the rejected run as evidence and measured it again
            assert f"SERVE--{label}-1" in reopened and after[label].valid
            old = json.loads((later / "rejected" / f"SERVE--{label}-1" / "run=0.harness.json")
                             .read_text())
            assert old["valid"] is False
    new_logs = sorted({f.name for f in later.glob("sweep-*.log*")}
                      - {f.name for f in earlier.glob("sweep-*.log*")})
    served = [s["overrides"] for f in new_logs
              for s in parse_sweep_log(read_text(later / f))["servers"]]
    missing = [k for k, p in after.items() if k not in before or not before[k].valid]
    assert served == [str({k: ast.literal_eval(v)}) for k, v in (m.split("=") for m in missing)]


@pytest.mark.parametrize("path", POINT_FILES, ids=_rel)
def test_every_compile_of_a_loop_fell_in_its_warm_up(path: Path) -> None:
    """A counted window compiled nothing; a warm-up's JIT line lies before the first
    window's bytes of the server log."""
    for p in _points(path.parent):
        for w in p.windows:
            assert not (w.valid and w.jit), (p.key, w.jit)
        if p.warmup is not None and p.warmup.jit:
            assert p.warmup.status == "ok"
            log = read_text(path.parent / "points" / p.key / "serve.log", errors="replace")
            for j in p.warmup.jit:
                assert j["offset"] < p.windows[0].log_span[0]
                assert f"JIT compilation during inference: {j['kernel']}" in log


def _no_constant(c: str) -> None:
    raise AssertionError(f"not strict JSON: {c}")


@pytest.mark.parametrize("run", RUNS, ids=_rel)
def test_every_record_is_strict_json_and_every_tune_call_passed_preflight(run: Path) -> None:
    for f in run.rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                json.loads(line, parse_constant=_no_constant)
    log = run / "commands.log"
    lines = log.read_text().splitlines() if log.is_file() else []
    last_preflight: re.Match[str] | None = None
    for ln in lines:  # each `tune` call ran after a passing preflight, in under 2 s
        if " preflight " in ln:
            last_preflight = re.search(r"rc=(\d+) seconds=([\d.]+)", ln)
        elif " $ python3 -m course_utils tune " in ln:
            assert last_preflight is not None, ln
            assert last_preflight.group(1) == "0" and float(last_preflight.group(2)) < 2.0
            last_preflight = None


def test_the_loop_vs_grid_table_rows_are_the_committed_comparisons() -> None:
    """Each case with both sides: measured, its verdict the committed comparison's (none for
    an unfinished loop), its ending the loop's replay."""
    committed = {(json.loads(f.read_text())["grid"]["dir"], json.loads(f.read_text())["loop"]
                  ["dir"]): json.loads(f.read_text()) for f in COMPARES}
    cases = json.loads(grid.INDEX.read_text())["cases"]
    rows = {r.case: r for r in grid.rows()}
    both = [c for c in cases if c.get("grid") and c.get("loop")]
    assert len(both) >= 4
    for c in both:
        row = rows[c["case"]]
        assert row.status in ("measured", "partial") and row.verdict and row.outcome
        assert row.outcome == replay_tune(RESULTS / c["loop"])["outcome"]["outcome"]
        key = (f"labs/results/{c['grid']}", f"labs/results/{c['loop']}")
        if row.outcome == "unfinished":  # no verdict until the loop has ended
            assert row.verdict == "loop_unfinished", c["case"]
        elif key in committed:
            assert row.verdict == committed[key]["verdict"]["decision"], c["case"]
        assert row.note.get("en") and row.note.get("zh")
    for c in cases:
        if not c.get("grid") and not c.get("loop"):
            assert rows[c["case"]].status == "not_run"


# ------------------------------------------- behaviours shown on particular recorded runs

DECODE12 = RESULTS / "h200-2026-11-30" / "decode12"


def test_todays_warm_up_rule_rejects_the_windows_the_live_rule_let_count() -> None:
    """Live (warm-up coverage 0.5) window 0 of every point counted, so the spread was wide
    and both steps tied; re-checked with today's rule window 0 is invalid everywhere, the
    clean windows agree within 1 %, and the same steps revert on the plateau."""
    live = _points(DECODE12)
    assert all(w.valid for p in live for w in p.windows)
    checked = [ServedPoint.from_json(r) for r in load_points_checked(DECODE12)]
    for p in checked:
        w0, w1 = p.windows
        assert not w0.valid and w0.validity_issues[0].startswith("the warm-up ran at most")
        assert w1.valid
    clean = [p.objective("request_goodput") for p in checked]
    assert max(clean) / min(clean) - 1 < 0.01
    assert [s["decision"] for s in _steps(DECODE12)] == ["tie", "tie"]
    r = replay_tune(DECODE12)
    assert [s["decision"] for s in r["steps"][1:]] == ["revert", "revert"]
    assert r["outcome"]["outcome"] == "past_knee"


def test_without_the_cross_server_spread_the_same_grid_would_crown_its_best() -> None:
    """The decode tie rests on the spread of one configuration across servers: with only the
    2 % plateau, the grid's best over the defaults is a keep."""
    rec = json.loads((RESULTS / "h200-2026-12-01" / "grid-decode" / "compare.json").read_text())
    assert rec["verdict"]["decision"] == "tie"
    pts = _grid(ROOT / rec["grid"]["dir"])
    best, pick = pts[rec["grid"]["best"]["label"]], pts[rec["loop_pick_in_grid"]["label"]]
    d = decide([best], _goodput(pick), objective="request_goodput", plateau=0.02,
               current_spread=None)
    assert d.decision == "keep"


def test_a_cut_sweep_log_keeps_each_combos_window_boundaries() -> None:
    """collect.py cut this log's middle; the main-run lines survive, so the defaults combo's
    JIT compile is read as its warm-up's, as the harness judged it live."""
    run = RESULTS / "h200-2026-12-01b" / "grid-knee"
    log = parse_sweep_log(read_text(run / "sweep-1.log"))
    assert log["jit_in_benchmark"] == 0 and log["jit_in_warmup"] == 2
    assert [s["benchmarks_done"] for s in log["servers"]] == [1, 1, 0]
    h = json.loads((run / "vllm_sweep" / "grid" / "SERVE--defaults" / "run=0.harness.json")
                   .read_text())
    assert h["valid"] is True


def test_the_kv_baseline_binds_nothing_and_the_preset_rate_passes_the_pool() -> None:
    """Little's law on the recorded run (requests in flight = rate x time in the server, each
    holding its prompt and half its output) puts the rehearsed pool's limit between the
    recorded rate and the kv preset's."""
    run = RESULTS / "h200-2026-12-01c" / "kv"
    r = replay_tune(run)
    assert r["diagnosis"]["leaf"] == "none" and r["outcome"]["outcome"] == "meets_slo"
    (p,) = _points(run)
    (folder,) = (run / "points").iterdir()
    serve = read_text(folder / "serve.log")
    pool = int(serve.split("GPU KV cache size: ")[1].split(" tokens")[0].replace(",", ""))
    bench = json.loads((folder / "bench.json").read_text())
    kv = presets.get("kv", "h200")
    assert (p.workload["input_len"], p.workload["output_len"]) == (kv.input_len, kv.output_len)
    per_request = p.workload["input_len"] + p.workload["output_len"] / 2

    def demand(rate: float) -> float:
        return rate * bench["mean_e2el_ms"] / 1000 * per_request

    assert p.diagnosis["evidence"]["preemptions"] == 0
    assert demand(bench["request_rate"]) < pool < demand(kv.rate)


def test_bench_calls_spend_their_time_before_vllms_main_run() -> None:
    """The phases split the harness's cost per bench call: after vLLM's main run is almost
    nothing; before it grows with the prompt tokens the call samples."""
    from tests.tooling import tool

    cost = tool("investigate/cost.py")
    run = RESULTS / "h200-2026-12-01c"
    long_prompts = cost.run_cost([run / "prefill"])  # 3072-token prompts
    short_prompts = cost.run_cost([run / "kv"])  # 512-token prompts
    assert long_prompts["bench_calls"] == 9 and short_prompts["bench_calls"] == 3
    assert long_prompts["bench_after_s"]["max"] < 0.1 and short_prompts["bench_after_s"]["max"] < 0.5
    assert long_prompts["bench_before_main_s"]["min"] > short_prompts["bench_before_main_s"]["max"]


# --------------------------------------------------------- the figures the book quotes


def _windows(loop: Path) -> list[list[float]]:
    return [[_goodput(p, i) for i in range(len(p.windows))] for p in _points(loop)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_field_notes_decode12_figures_are_the_records(lang: str) -> None:
    pts = _points(DECODE12)
    drops = [1 - w0 / w1 for w0, w1 in _windows(DECODE12)]
    w1 = [w[1] for w in _windows(DECODE12)]
    warm = [p.warmup.running_max for p in pts if p.warmup and p.warmup.running_max]
    peak0 = [p.windows[0].load["running_max"] for p in pts]
    (base6,) = _points(RESULTS / "h200-2026-11-30" / "decode")
    spread = _steps(DECODE12)[0]["spread_before"]
    dash = "-" if lang == "en" else "–"
    want = [f"{round(100 * min(drops))}{dash}{round(100 * max(drops))}{_pct(0, lang)[1:]}",
            f"{min(w1):.2f}{dash}{max(w1):.2f} req/s",
            f"{min(warm):.0f}{dash}{max(warm):.0f} " + ("running" if lang == "en" else "个请求"),
            f"{min(peak0):.0f}{dash}{max(peak0):.0f}",
            ("within " if lang == "en" else "相差 ")
            + _pct(base6.spread("request_goodput"), lang, ".1%"),
            f"{round(100 * spread)}" + (" % spread" if lang == "en" else "% 的波动")]
    text = " ".join(_field_notes(lang).split())
    for fig in want:
        assert fig in text, fig


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_field_notes_knee_table_is_the_recorded_windows(lang: str) -> None:
    knee = RESULTS / "h200-2026-12-01b" / "knee"
    sec = _field_notes(lang).split("## 10 · ", 1)[1]
    rows = re.findall(r"^\s*\| ([^|]+) \| (\d+\.\d\d) \| (\d+\.\d\d) \|$", sec, re.M)
    assert [[a, b] for _, a, b in rows] == [[f"{x:.2f}" for x in w] for w in _windows(knee)]
    assert [r[0] for r in rows][1:] == [f"`max_num_batched_tokens` {p.value}"
                                        for p in _points(knee)[1:]]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_field_notes_prefill_windows_and_share_are_the_recorded_ones(lang: str) -> None:
    prefill = RESULTS / "h200-2026-12-01c" / "prefill"
    sec = _field_notes(lang).split("## 11 · ", 1)[1]
    pairs = re.findall(r"(\d+\.\d\d) / (\d+\.\d\d)", sec)[:3]
    assert pairs == [tuple(f"{x:.2f}" for x in w) for w in _windows(prefill)]
    assert _pct(replay_tune(prefill)["outcome"]["goodput_share"], lang) in sec


def _notes() -> dict[str, dict[str, str]]:
    return {c["case"]: c.get("note", {})
            for c in json.loads(grid.INDEX.read_text())["cases"]}


def test_the_knee_note_quotes_the_verdicts_own_figures() -> None:
    c = json.loads((RESULTS / "h200-2026-12-01c" / "grid-knee" / "compare.json").read_text())
    v, note = c["verdict"], _notes()["knee"]
    assert v["decision"] == "tie" and v["gain"] > v["margin"] > v["apart"]
    for x in (v["gain"], v["apart"], v["margin"]):
        assert _pct(x, "en") in note["en"] and _pct(x, "zh") in note["zh"]
    best = c["grid"]["best"]
    pick = c["loop_pick_in_grid"]
    assert f"({best['score']:.2f} req/s)" in note["en"] and f"({pick['score']:.2f})" in note["en"]


def test_the_decode_note_order_follows_the_server_on_the_same_prompts() -> None:
    """On the grid's prompts (seed 0) the loop's server scored the defaults and the grid's
    best alike; the grid's server set them apart."""
    loop = {p.label: p for p in _points(DECODE12)}
    seed0 = {k: next(w.score.request_goodput for w in p.valid_windows if w.seed == 0 and w.score)
             for k, p in loop.items()}
    case = next(c for c in json.loads(grid.INDEX.read_text())["cases"]
                if c["case"] == "decode")
    g = _grid(RESULTS / case["grid"])
    best = max(g, key=lambda k: _goodput(g[k]))
    d, b = _goodput(g["defaults"]), _goodput(g[best])
    assert round(seed0["baseline"], 2) == round(seed0[best], 2)
    assert relative_spread([d, b]) > 0.2
    note = _notes()["decode"]["en"]
    assert f"{seed0['baseline']:.2f} req/s each" in note
    assert f"at {d:.2f} and {b:.2f}" in note


def test_the_prefill_note_quotes_the_same_prompt_agreement() -> None:
    """On the same prompts (seed 0) the loop's server and the grid's agree within the quoted
    share; the loop's second window (other prompts) reads higher for every value."""
    run = RESULTS / "h200-2026-12-01c"
    g = _grid(run / "grid-prefill" / "vllm_sweep")
    loop = {p.label if p.knob != "baseline" else "defaults": p for p in _points(run / "prefill")}
    apart, higher = [], []
    for label, gp in g.items():
        w0, w1 = loop[label].windows
        assert (w0.seed, w1.seed) == (0, 1000)
        apart.append(abs(_goodput(loop[label], 0) / _goodput(gp) - 1))
        higher.append(_goodput(loop[label], 1) / _goodput(loop[label], 0) - 1)
    note = _notes()["prefill"]["en"]
    assert f"agree within {_pct(max(apart), 'en', '.1%')}" in note
    assert f"reads {round(100 * min(higher))}-{round(100 * max(higher))} % higher" in note

"""Texts the lessons print from core: the ASCII spectrum, the prefill leaf's budget caveat, the
queue leaf's wording, the knob table's start-up wording, and the recorded knee curve."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import matplotlib.colors
import pytest

from course_utils.core import diagnose, knobs
from course_utils.lab import kneecurve

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "labs" / "results"
H200_SCANS = [
    RESULTS / "h200-2026-11-29c" / "slo",
    RESULTS / "h200x2-2026-11-30" / "scaleout" / "one",
    RESULTS / "h200x2-2026-11-30" / "repeats" / "beside-capacity-probes" / "scaleout" / "one",
]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_spectrum_columns_line_up_in_a_cjk_monospace_font(lang: str) -> None:
    text = knobs.spectrum_text(lang)
    # only characters whose width is certain: ASCII (1 column) and wide/fullwidth CJK (2)
    assert not [c for c in text if ord(c) > 127 and unicodedata.east_asian_width(c) not in "WF"]
    starts = set()
    for line in text.splitlines():
        m = re.match(r"^(\s+\S.*?\S)\s{2,}(\S.*)$", line)
        if m and not line.lstrip().startswith(("throughput", "吞吐")):
            starts.add(knobs.display_width(line[: m.start(2)]))
    assert len(starts) == 1, starts  # every right-hand item starts in the same column
    axis = text.splitlines()[0]
    widest = max(knobs.display_width(line) for line in text.splitlines())
    assert knobs.display_width(axis) == widest  # the axis spans the whole picture


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_spectrum_puts_each_knob_at_the_end_the_direction_map_gives(lang: str) -> None:
    text = knobs.spectrum_text(lang)
    body = text.split("\n\n")[1].splitlines()[1:]  # the two columns under their headers
    cols = [re.split(r"\s{2,}", ln.strip()) for ln in body]
    left = {c[0].split()[0] for c in cols}
    right = {c[1].split()[0] for c in cols if len(c) > 1}
    thr = {k.name for k, _, _ in knobs.moves("throughput") if not k.free_win}
    assert left == thr
    assert "speculative_config" in right and "gpu_memory_utilization" not in right


def test_prefill_names_the_budget_with_a_caveat_when_steps_leave_it_unused() -> None:
    def diag(tps: float, leaf: str = "prefill") -> diagnose.Diagnosis:
        return diagnose.Diagnosis(
            "prefill" if leaf == "prefill" else "queue", leaf,
            {"tokens_per_step": tps, "max_num_batched_tokens": 8192.0},
            ["max_num_batched_tokens"], {"max_num_batched_tokens": "raise"}, [])

    unused = diag(458.0)
    assert "458" in unused.why("en") and "not in use" in unused.why("en")
    assert "预算没用满" in unused.why("zh")
    assert diagnose.budget_caveat(diag(7800.0)) == ""  # steps fill the budget: no caveat
    assert diagnose.budget_caveat(diag(458.0, "queue_budget")) == ""


def test_queue_leaf_does_not_claim_arrivals_outrun_completions_whenever_requests_wait() -> None:
    leaf = diagnose.TREE["queue_replicas"]
    assert isinstance(leaf, diagnose.Leaf)
    for lang in ("en", "zh"):
        words = leaf.text[lang] + leaf.advice[lang]
        assert "arriv" not in words and "到达" not in words
    assert "no engine limit" in leaf.text["en"] and "stays" in leaf.advice["en"]


def test_memory_fraction_trade_says_start_up_is_refused_not_oom() -> None:
    trade = knobs.get("gpu_memory_utilization").trade
    assert "OOM" not in trade["en"] + trade["zh"]
    assert "refused" in trade["en"] and "拒绝启动" in trade["zh"]


def test_knee_of_the_recorded_h200_scans_is_50_to_60() -> None:
    scans = [kneecurve.scan_points(f) for f in H200_SCANS]
    assert kneecurve.knee_range(scans) == (50.0, 60.0)
    # one scan alone gives a narrower knee; the span widens, it never averages
    assert kneecurve.knee_range(scans[:1]) == (50.0, 55.0)


def test_a_rate_met_in_one_window_and_missed_in_another_is_undecided() -> None:
    fixed = RESULTS / "h200-2026-12-02" / "fixed" / "slo"
    pts = kneecurve.scan_points(fixed)  # every valid window, repeats included
    assert [(r, ok) for r, _, ok in pts if r == 24.0] == [(24.0, True), (24.0, False)]
    assert kneecurve.knee_range([pts]) == (16.0, 32.0)  # as keep.pick_knee: 24 is undecided
    with pytest.raises(ValueError, match="met the SLO and one that missed"):
        kneecurve.knee_range([[(24.0, 200.0, True), (24.0, 400.0, False)]])


def test_knee_range_needs_a_met_and_a_missed_rate() -> None:
    with pytest.raises(ValueError, match="met the SLO and one that missed"):
        kneecurve.knee_range([[(40.0, 100.0, True), (50.0, 200.0, True)]])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_load_latency_plot_labels_are_in_the_page_language(lang: str) -> None:
    fig = kneecurve.plot_load_latency([("scan", f) for f in H200_SCANS], 300, lang=lang)
    ax = fig.axes[0]
    texts = [ax.get_xlabel(), ax.get_title()] + [t.get_text() for t in ax.get_legend().texts]
    cjk = any(re.search(r"[\u4e00-\u9fff]", t) for t in texts)
    assert cjk is (lang == "zh")
    assert any("50-60" in t for t in texts)


def test_each_workload_gets_its_own_knee_band_in_its_colour() -> None:
    """Scans of different workloads: one band per scan, the line's colour, its own range."""
    arms = [("fixed", RESULTS / "h200-2026-12-02" / "fixed" / "slo"),
            ("trace", RESULTS / "h200-2026-12-02b" / "trace" / "slo")]
    ax = kneecurve.plot_load_latency(arms, 300, lang="en", band_each=True).axes[0]
    legend = [t.get_text() for t in ax.get_legend().texts]
    assert [t for t in legend if "req/s" in t] == ["knee: 16-32 req/s", "knee: 56-72 req/s"]
    spans = [p for p in ax.patches if p.get_label().startswith("knee")]
    lines = [ln for ln in ax.get_lines() if ln.get_label() in ("fixed", "trace")]
    assert [matplotlib.colors.to_hex(p.get_facecolor()[:3]) for p in spans] == [
        matplotlib.colors.to_hex(ln.get_color()) for ln in lines]
    # one shared band over both would span 16-72 and say nothing about either
    shared = kneecurve.plot_load_latency(arms, 300, lang="en").axes[0]
    assert any("16-72" in t.get_text() for t in shared.get_legend().texts)

"""lab.plots: the labs' figures in the page's language, the baseline on the goodput axis,
linear latency axes around the SLO box, no empty accuracy panel on dummy weights."""

from __future__ import annotations

import re
import warnings
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from course_utils.core.slo import SLO  # noqa: E402
from course_utils.lab import plots  # noqa: E402
from tests.tooling import BOOK_MATPLOTLIBRC  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")


def _texts(fig: Any) -> list[str]:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.texts]
        leg = ax.get_legend()
        if leg is not None:
            out += [t.get_text() for t in leg.get_texts()]
    return [t for t in out if t]


def _point(knob: str, value: Any, req: float, gate: float, tput: float, ttft: float,
           tpot: float, knobs: dict | None = None) -> dict:
    return {"knob": knob, "value": value, "status": "ok", "knobs": knobs or {},
            "score": {"request_goodput": req, "gate_goodput": gate, "request_throughput": tput},
            "bench": {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot}}


POINTS = [
    _point("baseline", None, 5.0, 0.0, 39.7, 1467.0, 13.5, {"max_num_seqs": 64}),
    _point("max_num_seqs", 256, 42.69, 42.69, 42.69, 201.0, 16.2),
    _point("max_num_seqs", 1024, 42.39, 42.53, 42.53, 263.0, 20.2),
]


def test_goodput_includes_the_baseline_from_zero_and_labels_the_tie() -> None:
    fig = plots.plot_goodput(POINTS, "max_num_seqs")
    ax = fig.axes[0]
    xs = sorted({x for line in ax.get_lines() for x in line.get_xdata()})
    assert xs == [64.0, 256.0, 1024.0]
    assert ax.get_ylim()[0] == 0
    notes = [t.get_text() for t in ax.texts]
    assert notes.count("tie (within 2%)") == 2 and "baseline" in notes


def test_goodput_without_a_tie_has_no_tie_label() -> None:
    pts = [POINTS[0], POINTS[1], _point("max_num_seqs", 1024, 30.0, 30.0, 30.0, 300, 20)]
    notes = [t.get_text() for t in plots.plot_goodput(pts, "max_num_seqs").axes[0].texts]
    assert not any("tie" in n for n in notes)


def test_latency_box_is_linear_around_the_slo_with_the_legend_outside() -> None:
    fig = plots.plot_latency_box(POINTS, "max_num_seqs", SLO.parse("ttft:300 tpot:50"))
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] > 50
    assert ax.get_ylim()[1] > 1467
    leg = ax.get_legend()
    assert leg is not None and leg.get_bbox_to_anchor().y0 < ax.get_window_extent().y0
    assert "64 (baseline)" in [t.get_text() for t in ax.texts]


def _triple_recs(dummy: bool) -> list[dict]:
    return [{"status": "ok", "value": v, "output_tok_s": t, "latency_p50_s": 1.0,
             "latency_p99_s": 2.0, "kv_cache_tokens": k, "accuracy": None if dummy else 0.8,
             "load_format": "dummy" if dummy else "auto"}
            for v, t, k in ((0.8, 100.0, 1000), (0.94, 110.0, 1500))]


def test_triple_drops_the_accuracy_panel_on_dummy_weights() -> None:
    fig = plots.plot_triple(_triple_recs(True), "gpu_memory_utilization")
    assert len(fig.axes) == 3
    assert "accuracy: n/a (dummy weights)" in _texts(fig)
    fig4 = plots.plot_triple(_triple_recs(False), "gpu_memory_utilization")
    assert len(fig4.axes) == 4
    assert all(t.get_fontsize() >= 10 for ax in fig.axes for t in ax.get_xticklabels())


@pytest.mark.parametrize("make", [
    lambda lang: plots.plot_goodput(POINTS, "max_num_seqs", lang=lang),
    lambda lang: plots.plot_latency_box(POINTS, "max_num_seqs", SLO.parse("ttft:300 tpot:50"),
                                        lang=lang),
    lambda lang: plots.plot_triple(_triple_recs(True), "gpu_memory_utilization", lang=lang),
    lambda lang: plots.plot_knee([{"status": "ok", "rate": 40, "request_throughput": 39.0,
                                   "gate_goodput": 39.0, "request_goodput": 39.0}], lang=lang),
    lambda lang: plots.plot_series([], lang=lang),
    lambda lang: plots.plot_engine_stats({"stats": {}}, "gpu_memory_utilization", lang=lang),
])
def test_every_plot_speaks_the_page_language(make: Any) -> None:
    """... and draws it: under the book's matplotlibrc no glyph is missing from the fonts."""
    with matplotlib.rc_context(fname=str(BOOK_MATPLOTLIBRC)), warnings.catch_warnings():
        warnings.filterwarnings("error", message="Glyph .* missing from font")
        zh_fig = make("zh")
        zh_fig.canvas.draw()
    zh = _texts(zh_fig)
    en = _texts(make("en"))
    assert zh and all(CJK.search(t) for t in zh if re.search(r"[a-z]{4,}", t) and " " in t
                      and not t.startswith(("p99", "req/s"))), zh
    assert any(CJK.search(t) for t in zh)
    assert not any(CJK.search(t) for t in en), en


def test_unknown_language_is_refused() -> None:
    with pytest.raises(ValueError, match="lang"):
        plots.plot_goodput(POINTS, "max_num_seqs", lang="fr")


def test_a_page_shows_a_palette_png_a_third_of_the_bytes() -> None:
    import io

    from PIL import Image

    fig = plots.plot_goodput(POINTS, "max_num_seqs", lang="en")
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=fig.dpi, bbox_inches="tight")
    small = plots.palette_png(fig)
    im = Image.open(io.BytesIO(small))
    assert im.mode == "P" and im.size == Image.open(raw).size
    assert len(small) < 0.5 * len(raw.getvalue())

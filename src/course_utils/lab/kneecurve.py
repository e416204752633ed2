"""The load-latency curve of recorded knee scans: p99 TTFT against the offered rate, one line
per scan, with the SLO's TTFT target. The lessons draw it from the scans in labs/results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_utils.core.texts import check_lang
from course_utils.lab.plots import plot_text, pyplot, save_figure


def scan_points(folder: Path) -> list[tuple[float, float, bool]]:
    """(offered rate, p99 TTFT ms, met the SLO) of each valid window of a knee scan (a rate's
    latest record: repeats included; validity re-checked as ``replay.load_knee`` does), by
    rate."""
    from course_utils.lab.replay import load_knee

    rows = load_knee(folder)
    pts = [
        (float(r["rate"]), float(w["bench"]["p99_ttft_ms"]), bool(w["score"]["meets_slo"]))
        for r in rows
        if r.get("status") == "ok" and r.get("rate") != "inf"
        for w in r.get("windows", [])
        if w.get("valid") is not False and w.get("status", "ok") == "ok"
    ]
    return sorted(pts)


def knee_range(scans: Sequence[Sequence[tuple[float, float, bool]]]) -> tuple[float, float]:
    """The span of the scans' knees: each scan's knee lies between its highest rate whose
    windows all met the SLO and its lowest whose windows all missed (a rate with both is
    undecided); the span runs from the lowest such bound to the highest, so two scans that
    disagree at one rate widen it instead of cancelling out."""
    lows, highs = [], []
    for pts in scans:
        met = {r for r, _, ok in pts if ok}
        missed = {r for r, _, ok in pts if not ok}
        if not met - missed or not missed - met:
            raise ValueError("each scan needs a rate that met the SLO and one that missed it")
        lows.append(max(met - missed))
        highs.append(min(missed - met))
    return min(lows), max(highs)


def plot_load_latency(
    scans: Sequence[tuple[str, Path]],
    ttft_slo_ms: float,
    lang: str = "en",
    path: str | Path | None = None,
    band: Sequence[Path] | None = None,
    band_each: bool = False,
) -> Any:
    """One line per (label, folder with knee.jsonl); filled markers met the SLO; the shaded
    band is ``knee_range`` of the folders in ``band`` (all the scans when None: give it
    the scans of one GPU and workload only). ``band_each``: each scan's own knee range
    instead, in its line's colour (scans of different workloads)."""
    check_lang(lang)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    markers = "os^Dv"
    for i, (label, folder) in enumerate(scans):
        pts = scan_points(folder)
        (ln,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", lw=1.2, label=label)
        c = ln.get_color()
        for x, y, ok in pts:
            ax.plot(x, y, markers[i % len(markers)], color=c, ms=6, mfc=c if ok else "white")
        if band_each:
            lo, hi = knee_range([pts])
            text = plot_text("knee_range", lang, lo=lo, hi=hi)
            ax.axvspan(lo, hi, color=c, alpha=0.12, label=text)
    if not band_each:
        lo, hi = knee_range([scan_points(f) for f in (band or [f for _, f in scans])])
        text = plot_text("knee_range", lang, lo=lo, hi=hi)
        ax.axvspan(lo, hi, color="grey", alpha=0.12, label=text)
    ax.axhline(ttft_slo_ms, color="grey", ls="--", lw=1)
    ax.text(
        ax.get_xlim()[0],
        ttft_slo_ms,
        " " + plot_text("curve_slo", lang, ms=ttft_slo_ms),
        va="bottom",
        fontsize=8,
        color="grey",
    )
    top = max([ttft_slo_ms] + [y for line in ax.get_lines() for y in line.get_ydata()])
    ax.set_ylim(0, top * 1.5)  # room above the data for the legend, clear of the SLO label
    ax.set(
        xlabel=plot_text("offered_rate", lang),
        ylabel=plot_text("p99_ttft", lang),
        title=plot_text("curve_title", lang),
    )
    ax.legend(
        fontsize=8,
        title=f"● {plot_text('met_slo', lang)}  ○ {plot_text('missed_slo', lang)}",
        title_fontsize=8,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)

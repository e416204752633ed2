"""The labs' plots (matplotlib, Agg outside a notebook): each saves a PNG and returns the
figure. Titles, labels and legends are in `lang` ("en" or "zh"; the book's matplotlibrc puts
a CJK font first)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core.texts import check_lang, package_texts

__all__ = [
    "plot_engine_stats",
    "plot_goodput",
    "plot_knee",
    "plot_latency_box",
    "plot_series",
    "plot_triple",
]


# key -> {"en": ..., "zh": ...}: every title, label and legend of the labs' plots
_T = package_texts("plot_texts")


def plot_text(key: str, lang: str, **kw: Any) -> str:
    text = _T[key][check_lang(lang)]
    return text.format(**kw) if kw else text


def pyplot() -> Any:
    import matplotlib

    if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
        matplotlib.use("Agg")  # scripts and tests; a notebook keeps its inline backend
    import matplotlib.pyplot as plt

    return plt


def _show_as_palette_png() -> None:
    """In a notebook, show figures as ``palette_png`` (after the inline backend's own)."""
    if "ipykernel" not in sys.modules:
        return
    from IPython import get_ipython
    from matplotlib.figure import Figure

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, palette_png)


def palette_png(fig: Any) -> bytes:
    """The figure as a 256-colour PNG: a third of matplotlib's bytes, the same to the eye."""
    import io

    from PIL import Image

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=fig.dpi, bbox_inches="tight", facecolor=fig.get_facecolor())
    raw.seek(0)
    out = io.BytesIO()
    Image.open(raw).convert("RGB").quantize(colors=256).save(out, "PNG", optimize=True)
    return out.getvalue()


def save_figure(fig: Any, path: str | Path | None) -> Any:
    _show_as_palette_png()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def finish(fig: Any, ax: Any, path: str | Path | None, **labels: Any) -> Any:
    """Set ``labels`` (xlabel, ylabel, title, ...) on ``ax``, grid it, save the figure."""
    ax.set(**labels)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_knee(
    records: Sequence[Mapping[str, Any]], path: str | Path | None = None, lang: str = "en"
) -> Any:
    """Completed throughput and gate goodput against the offered rate."""
    plot_text("knee_title", lang)
    plt = pyplot()
    ok = sorted(
        (r for r in records if r.get("status") == "ok" and r["rate"] != "inf"),
        key=lambda r: float(r["rate"]),
    )
    x = [float(r["rate"]) for r in ok]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(x, [r["request_throughput"] for r in ok], "o-", label=plot_text("throughput_rps", lang))
    ax.plot(x, [r["gate_goodput"] for r in ok], "s--", label=plot_text("gate_rps", lang))
    ax.plot(
        x,
        [r.get("request_goodput") or 0 for r in ok],
        "^:",
        label=plot_text("req_goodput_vllm", lang),
    )
    if x:
        ax.plot([0, max(x)], [0, max(x)], color="grey", lw=0.8, label=plot_text("offered_eq", lang))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return finish(
        fig,
        ax,
        path,
        xlabel=plot_text("offered_rate", lang),
        ylabel="req/s",
        title=plot_text("knee_title", lang),
    )


def _effective(p: Mapping[str, Any], knob: str) -> float | None:
    """The knob's value a point ran with: its swept value, or for a baseline point the value
    in its `knobs` (None when the baseline left the knob at a default that depends on the
    GPU: it is not placed on the axis)."""
    if p.get("knob") == knob:
        return float(p["value"])
    if p.get("knob") in (None, "baseline"):
        v = (p.get("knobs") or {}).get(knob)
        return None if v is None else float(v)
    return None


def _by_value(points: Sequence[Mapping[str, Any]], knob: str) -> list[Mapping[str, Any]]:
    """One ok point per effective value of `knob` (the last recorded; a swept point wins
    over a baseline at the same value), the baseline included, in value order."""
    best: dict[float, Mapping[str, Any]] = {}
    for p in points:
        if p.get("status") != "ok":
            continue
        v = _effective(p, knob)
        if v is None:
            continue
        if v in best and best[v].get("knob") == knob and p.get("knob") != knob:
            continue
        best[v] = p
    return [best[v] for v in sorted(best)]


def _is_base(p: Mapping[str, Any]) -> bool:
    return p.get("knob") in (None, "baseline")


def plot_goodput(
    points: Sequence[Mapping[str, Any]],
    knob: str,
    path: str | Path | None = None,
    lang: str = "en",
    plateau: float = 0.02,
) -> Any:
    """Both goodput scores (gate and vLLM's per-request) and throughput against the knob,
    the baseline included (at its effective value); the y-axis starts at 0, and values whose
    request goodput is within `plateau` of the best are marked as a tie."""
    plot_text("goodput_title", lang, knob=knob)
    plt = pyplot()
    rows = _by_value(points, knob)
    x = [_effective(p, knob) for p in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(
        x,
        [p["score"]["request_throughput"] for p in rows],
        "o-",
        label=plot_text("throughput", lang),
    )
    ax.plot(x, [p["score"]["gate_goodput"] for p in rows], "s--", label=plot_text("gate", lang))
    req = [p["score"].get("request_goodput") or 0 for p in rows]
    ax.plot(x, req, "^:", label=plot_text("req_goodput", lang))
    top = max(req, default=0.0)
    bar = top / (1.0 + plateau)  # within the plateau of the best: a tie
    tied = sum(1 for r in req if r >= bar) > 1
    for p, xv, yv in zip(rows, x, req, strict=True):
        notes = [plot_text("baseline", lang)] if _is_base(p) else []
        if tied and top > 0 and yv > 0 and yv >= bar:
            notes.append(plot_text("tie", lang, p=plateau))
        if notes:
            ax.annotate(
                " · ".join(notes),
                (xv, yv),
                textcoords="offset points",
                xytext=(0, -14),
                ha="center",
                fontsize=8,
            )
    xs = [float(v) for v in x if v is not None]
    if len(set(xs)) > 1 and max(xs) / max(min(xs), 1e-9) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:g}" for v in x])
    ax.set_ylim(0, max([top] + [p["score"]["request_throughput"] for p in rows] + [1]) * 1.15)
    ax.legend(fontsize=8, loc="lower right")
    return finish(
        fig,
        ax,
        path,
        xlabel=knob,
        ylabel="req/s",
        title=plot_text("goodput_title", lang, knob=knob),
    )


def plot_latency_box(
    points: Sequence[Mapping[str, Any]],
    knob: str,
    slo: Any,
    path: str | Path | None = None,
    lang: str = "en",
) -> Any:
    """p99 TTFT against p99 TPOT for each value of the knob (the baseline included), on
    linear axes around the SLO box (the region to stay inside); the legend sits outside."""
    plot_text("latency_title", lang, knob=knob)
    plt = pyplot()
    rows = [
        p
        for p in _by_value(points, knob)
        if p.get("bench", {}).get("p99_ttft_ms") is not None
        and p.get("bench", {}).get("p99_tpot_ms") is not None
    ]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ttft = [p["bench"]["p99_ttft_ms"] for p in rows]
    tpot = [p["bench"]["p99_tpot_ms"] for p in rows]
    ax.plot(tpot, ttft, "o-", color="C0")
    for p, x, y in zip(rows, tpot, ttft, strict=True):
        value = f"{_effective(p, knob):g}"
        label = f"{value} ({plot_text('baseline', lang)})" if _is_base(p) else value
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
    xs, ys = list(tpot), list(ttft)
    if getattr(slo, "ttft_ms", None) and getattr(slo, "tpot_ms", None):
        from matplotlib.patches import Rectangle

        ax.add_patch(
            Rectangle(
                (0, 0),
                slo.tpot_ms,
                slo.ttft_ms,
                fill=True,
                alpha=0.12,
                color="green",
                label=plot_text("slo_box", lang, slo=slo),
            )
        )
        ax.axhline(slo.ttft_ms, color="green", lw=0.8)
        ax.axvline(slo.tpot_ms, color="green", lw=0.8)
        xs.append(slo.tpot_ms)
        ys.append(slo.ttft_ms)
    ax.set_xlim(0, max(xs + [1]) * 1.25)
    ax.set_ylim(0, max(ys + [1]) * 1.15)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    labels = {"xlabel": plot_text("p99_tpot", lang), "ylabel": plot_text("p99_ttft", lang)}
    return finish(fig, ax, path, **labels, title=plot_text("latency_title", lang, knob=knob))


def plot_series(
    samples: Sequence[Any], path: str | Path | None = None, title: str = "", lang: str = "en"
) -> Any:
    """The /metrics series sampled during a load: waiting, running, KV usage."""
    from course_utils.core import metrics as m

    plot_text("series_title", lang)
    plt = pyplot()
    if not samples:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, plot_text("no_samples", lang), ha="center")
        return save_figure(fig, path)
    t0 = samples[0].t
    t = [s.t - t0 for s in samples]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(t, [s.gauge(m.WAITING) or 0 for s in samples], label=plot_text("waiting", lang))
    ax.plot(t, [s.gauge(m.RUNNING) or 0 for s in samples], label=plot_text("running", lang))
    ax.set_xlabel(plot_text("seconds", lang))
    ax.set_ylabel(plot_text("requests", lang))
    ax2 = ax.twinx()
    ax2.plot(
        t,
        [100 * (s.gauge(m.KV_USAGE) or 0) for s in samples],
        color="tab:red",
        lw=0.8,
        label=plot_text("kv_pct", lang),
    )
    ax2.set_ylim(0, 105)
    ax2.set_ylabel(plot_text("kv_pct", lang))
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")
    return finish(fig, ax, path, title=title or plot_text("series_title", lang))


def plot_engine_stats(
    spread: Mapping[str, Any], knob: str, path: str | Path | None = None, lang: str = "en"
) -> Any:
    """Lab 01: vLLM's 10 s engine stats of each point (``keep.same_batch_gap``):
    generation tokens/s (solid) and KV cache usage (dashed) against time in the pass."""
    plot_text("stats_title", lang)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax2 = ax.twinx()
    for i, (value, rows) in enumerate(
        sorted(spread.get("stats", {}).items(), key=lambda kv: float(kv[0]))
    ):
        color = f"C{i}"
        t = [r.t_s for r in rows]
        ax.plot(t, [r.gen_tok_s for r in rows], "o-", color=color, ms=3, label=f"{knob}={value}")
        ax2.plot(t, [100 * r.kv_usage for r in rows], "--", color=color, lw=0.9)
    ax2.set(ylabel=plot_text("kv_pct_dashed", lang), ylim=(0, 105))
    ax.legend(fontsize=8, loc="lower left")
    labels = {"xlabel": plot_text("stats_x", lang), "ylabel": plot_text("gen_tok_s", lang)}
    return finish(fig, ax, path, **labels, title=plot_text("stats_title", lang))


def plot_triple(
    records: Sequence[Mapping[str, Any]],
    knob: str,
    path: str | Path | None = None,
    lang: str = "en",
) -> Any:
    """Lab 01: accuracy, output tok/s, p50/p99 latency and KV tokens against the knob. On
    dummy weights (no accuracy) the accuracy panel is left out and the title says n/a; the
    panels are stacked in one column, 6 in wide, so their ticks stay readable on a phone."""
    plot_text("accuracy", lang)
    plt = pyplot()
    rows = sorted((r for r in records if r.get("status") == "ok"), key=lambda r: float(r["value"]))
    x = [float(r["value"]) for r in rows]
    acc = [r.get("accuracy") for r in rows]
    has_acc = (
        bool(rows) and all(a is not None for a in acc) and rows[0].get("load_format") != "dummy"
    )
    n = 4 if has_acc else 3
    fig, axes = plt.subplots(n, 1, figsize=(6, 2.4 * n + 0.4))
    axes = list(getattr(axes, "flat", axes))
    if has_acc:
        ax_acc = axes.pop(0)
        ax_acc.plot(x, [100 * float(a or 0) for a in acc], "o-")
        ax_acc.set_ylim(0, 105)
        ax_acc.set_title(plot_text("accuracy", lang))
        ax_acc.set_xlabel(knob)
        ax_acc.grid(alpha=0.3)
    axes[0].plot(x, [r.get("output_tok_s") for r in rows], "o-")
    axes[0].set_title(plot_text("out_tok_s", lang))
    axes[0].set_ylim(bottom=0)
    axes[1].plot(x, [r.get("latency_p50_s") for r in rows], "o-", label="p50")
    axes[1].plot(x, [r.get("latency_p99_s") for r in rows], "s--", label="p99")
    axes[1].set_title(plot_text("latency_s", lang))
    axes[1].set_ylim(bottom=0)
    axes[1].legend(fontsize=9)
    axes[2].plot(x, [r.get("kv_cache_tokens") for r in rows], "o-")
    axes[2].set_title(plot_text("kv_tokens", lang))
    for ax in axes:
        ax.set_xlabel(knob)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{v:g}" for v in x])
        ax.grid(alpha=0.3)
    if not has_acc:
        fig.suptitle(plot_text("accuracy_na", lang), fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)

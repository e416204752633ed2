"""The labs' plots (matplotlib, Agg outside a notebook): each saves a PNG and returns the
figure."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "plot_engine_stats",
    "plot_goodput",
    "plot_knee",
    "plot_latency_box",
    "plot_series",
    "plot_triple",
]


def _plt() -> Any:
    import matplotlib

    if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
        matplotlib.use("Agg")  # scripts and tests; a notebook keeps its inline backend
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path | None) -> Any:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def plot_knee(records: Sequence[Mapping[str, Any]], path: str | Path | None = None) -> Any:
    """Completed throughput and gate goodput against the offered rate."""
    plt = _plt()
    ok = sorted((r for r in records if r.get("status") == "ok" and r["rate"] != "inf"),
                key=lambda r: float(r["rate"]))
    x = [float(r["rate"]) for r in ok]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(x, [r["request_throughput"] for r in ok], "o-", label="throughput (req/s)")
    ax.plot(x, [r["gate_goodput"] for r in ok], "s--", label="gate goodput (req/s)")
    ax.plot(x, [r.get("request_goodput") or 0 for r in ok], "^:", label="vLLM request_goodput")
    if x:
        ax.plot([0, max(x)], [0, max(x)], color="grey", lw=0.8, label="offered = completed")
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("req/s")
    ax.set_title("Step 0: where is the knee?")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _by_value(points: Sequence[Mapping[str, Any]], knob: str) -> list[Mapping[str, Any]]:
    rows = [p for p in points if p.get("knob") == knob and p.get("status") == "ok"]
    best: dict[Any, Mapping[str, Any]] = {}
    for p in rows:  # one point per value (the last recorded)
        best[p["value"]] = p
    return sorted(best.values(), key=lambda p: float(p["value"]))


def plot_goodput(points: Sequence[Mapping[str, Any]], knob: str,
                 path: str | Path | None = None) -> Any:
    """Both goodput scores (gate and vLLM's per-request) and throughput against the knob."""
    plt = _plt()
    rows = _by_value(points, knob)
    x = [float(p["value"]) for p in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(x, [p["score"]["request_throughput"] for p in rows], "o-", label="throughput")
    ax.plot(x, [p["score"]["gate_goodput"] for p in rows], "s--", label="gate goodput")
    ax.plot(x, [p["score"].get("request_goodput") or 0 for p in rows], "^:",
            label="request goodput (vLLM)")
    ax.set_xlabel(knob)
    ax.set_ylabel("req/s")
    ax.set_title(f"Goodput vs {knob}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_latency_box(points: Sequence[Mapping[str, Any]], knob: str, slo: Any,
                     path: str | Path | None = None) -> Any:
    """p99 TTFT and p99 TPOT against the knob; the SLO drawn as the box to stay inside."""
    plt = _plt()
    rows = _by_value(points, knob)
    fig, ax = plt.subplots(figsize=(5.2, 4))
    ttft = [p["bench"].get("p99_ttft_ms") for p in rows]
    tpot = [p["bench"].get("p99_tpot_ms") for p in rows]
    ax.plot(tpot, ttft, "o-")
    for p, x, y in zip(rows, tpot, ttft, strict=True):
        if x is not None and y is not None:
            ax.annotate(f"{p['value']}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    if getattr(slo, "ttft_ms", None) and getattr(slo, "tpot_ms", None):
        from matplotlib.patches import Rectangle

        ax.add_patch(Rectangle((0, 0), slo.tpot_ms, slo.ttft_ms, fill=True, alpha=0.12,
                               color="green", label=f"SLO: {slo}"))
        ax.axhline(slo.ttft_ms, color="green", lw=0.8)
        ax.axvline(slo.tpot_ms, color="green", lw=0.8)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_yscale("symlog", linthresh=100)
    ax.set_xlabel("p99 TPOT (ms)")
    ax.set_ylabel("p99 TTFT (ms)")
    ax.set_title(f"p99 latency vs {knob} (labels: value)")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_series(samples: Sequence[Any], path: str | Path | None = None, title: str = "") -> Any:
    """The /metrics series sampled during a load: waiting, running, KV usage."""
    from course_utils.core import metrics as m

    plt = _plt()
    if not samples:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "no samples", ha="center")
        return _save(fig, path)
    t0 = samples[0].t
    t = [s.t - t0 for s in samples]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(t, [s.gauge(m.WAITING) or 0 for s in samples], label="waiting")
    ax.plot(t, [s.gauge(m.RUNNING) or 0 for s in samples], label="running")
    ax.set_xlabel("seconds")
    ax.set_ylabel("requests")
    ax2 = ax.twinx()
    ax2.plot(t, [100 * (s.gauge(m.KV_USAGE) or 0) for s in samples], color="tab:red",
             lw=0.8, label="KV usage %")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("KV usage %")
    ax.set_title(title or "/metrics under load")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_engine_stats(spread: Mapping[str, Any], knob: str, path: str | Path | None = None
                      ) -> Any:
    """Lab 01: vLLM's 10 s engine stats of each point (``keep.same_batch_gap``):
    generation tokens/s (solid) and KV cache usage (dashed) against time in the pass."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax2 = ax.twinx()
    for i, (value, rows) in enumerate(sorted(spread.get("stats", {}).items(),
                                             key=lambda kv: float(kv[0]))):
        color = f"C{i}"
        t = [r.t_s for r in rows]
        ax.plot(t, [r.gen_tok_s for r in rows], "o-", color=color, ms=3,
                label=f"{knob}={value}")
        ax2.plot(t, [100 * r.kv_usage for r in rows], "--", color=color, lw=0.9)
    ax.set_xlabel("seconds into the pass (vLLM's stats lines)")
    ax.set_ylabel("generation tok/s")
    ax2.set_ylabel("KV usage % (dashed)")
    ax2.set_ylim(0, 105)
    ax.set_title("engine stats: same batch until the KV cache fills")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_triple(records: Sequence[Mapping[str, Any]], knob: str,
                path: str | Path | None = None) -> Any:
    """Lab 01: accuracy, output tok/s, p50/p99 latency and KV tokens against the knob."""
    plt = _plt()
    rows = sorted((r for r in records if r.get("status") == "ok"), key=lambda r: float(r["value"]))
    x = [float(r["value"]) for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    acc = [r.get("accuracy") for r in rows]
    if rows and all(a is not None for a in acc) and rows[0].get("load_format") != "dummy":
        axes[0].plot(x, [100 * a for a in acc], "o-")
        axes[0].set_ylim(0, 105)
    else:
        axes[0].text(0.5, 0.5, "accuracy: n/a\n(dummy weights)", ha="center", va="center",
                     transform=axes[0].transAxes)
    axes[0].set_title("quality: accuracy %")
    axes[1].plot(x, [r.get("output_tok_s") for r in rows], "o-")
    axes[1].set_title("output tok/s")
    axes[2].plot(x, [r.get("latency_p50_s") for r in rows], "o-", label="p50")
    axes[2].plot(x, [r.get("latency_p99_s") for r in rows], "s--", label="p99")
    axes[2].set_title("per-request latency (s)")
    axes[2].legend(fontsize=8)
    axes[3].plot(x, [r.get("kv_cache_tokens") for r in rows], "o-")
    axes[3].set_title("GPU KV cache (tokens)")
    for ax in axes:
        ax.set_xlabel(knob)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)



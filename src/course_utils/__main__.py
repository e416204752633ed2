"""``python -m course_utils``: the course's modules from a terminal.

Subcommands: knobs, capacity, goodput, diagnose, replicas (each with ``--format json``), plus
sweep, tune, preflight and quiz from the modules that own them. Bad input: one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from course_utils import quiz
from course_utils.core import capacity, diagnose, knobs, metrics, replicas, slo
from course_utils.lab import cli as lab_cli
from course_utils.lab import workload as lab_workload

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


def _print(data: Any, fmt: str, text: Callable[[], str]) -> None:
    if fmt == "json":
        print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    else:
        print(text())


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    out = ["  ".join(c.ljust(width[c]) for c in cols)]
    out += ["  ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(out)


def cmd_knobs(a: argparse.Namespace) -> None:
    if a.validate:
        values = dict(_kv(x) for x in a.validate)
        checked = knobs.validate(values, gpu_memory_gib=a.gpu_memory_gib, entry=a.entry)
        args = knobs.to_cli_args(checked)
        _print({"valid": checked, "args": args}, a.format, lambda: "ok: " + " ".join(args))
        return
    if a.goal:
        ks = knobs.recommend(a.goal)
        _print([k.name for k in ks], a.format, lambda: "\n".join(k.flag for k in ks))
        return
    rows = knobs.table(a.lang, a.gpu_memory_gib, a.entry)
    data = [
        {
            "name": k.name,
            "flag": k.flag,
            "kwarg": k.kwarg,
            "config": k.config,
            "source": k.source,
            "group": k.group,
            "default": knobs.default(k.name, gpu_memory_gib=a.gpu_memory_gib, entry=a.entry),
            "throughput": k.throughput,
            "ttft": k.ttft,
            "itl": k.itl,
            "relieves": k.relieves,
            "move": k.move[a.lang],
            "trade": k.trade[a.lang],
        }
        for k in knobs.KNOBS.values()
    ]
    _print(data, a.format, lambda: _table(rows))


def _kv(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep:
        raise knobs.KnobError(f"write knob=value, not {item!r}")
    return name, value


def cmd_capacity(a: argparse.Namespace) -> None:
    shape = capacity.load_model(a.model)
    data: dict[str, Any] = {
        "model": shape.name,
        "params_b": round(shape.params() / 1e9, 3),
        "weights_gib": round(shape.weight_gib(), 2),
        "kv_bytes_per_token": shape.kv_bytes_per_token(a.kv_dtype),
    }
    if a.kv_memory_gib is not None:
        data["kv_memory_gib"] = a.kv_memory_gib
        data["kv_tokens"] = shape.kv_tokens(a.kv_memory_gib, a.kv_dtype)
        data["max_concurrency"] = round(
            shape.max_concurrency(a.kv_memory_gib, a.max_model_len, a.kv_dtype), 2
        )
    gpu = capacity.custom_gpu(a.gpu_total_gib) if a.gpu_total_gib else a.gpu
    if gpu:
        f = capacity.predict(
            shape,
            gpu,
            a.gpu_memory_utilization,
            a.max_model_len,
            a.kv_dtype,
            entry=a.entry,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=a.max_num_batched_tokens,
            overhead_gib=a.overhead_gib,
        )
        data["fit"] = {
            k: (round(v, 2) if isinstance(v, float) else v) for k, v in f.as_dict().items()
        }
        if a.gpu:
            data["tpot_floor_ms_batch1"] = round(capacity.tpot_floor_ms(shape, a.gpu), 2)
    data["max_model_len"] = a.max_model_len

    def text() -> str:
        lines = [f"{k}: {v}" for k, v in data.items() if k != "fit"]
        if "fit" in data:
            lines += ["fit (predicted):"] + [f"  {k}: {v}" for k, v in data["fit"].items()]
        return "\n".join(lines)

    _print(data, a.format, text)


def cmd_goodput(a: argparse.Namespace) -> None:
    s = slo.SLO.parse(a.slo)
    r = slo.BenchResult.from_json(a.bench)
    sc = slo.score(r, s)
    data = {
        "slo": str(s),
        "request_throughput": sc.request_throughput,
        "gate_goodput": sc.gate_goodput,
        "request_goodput": sc.request_goodput,
        "request_goodput_source": sc.request_goodput_source,
        "meets_slo": sc.meets_slo,
        "violations": sc.violations,
        "why_they_differ": sc.why_they_differ(a.lang),
    }

    def text() -> str:
        rg = "n/a" if sc.request_goodput is None else f"{sc.request_goodput:.2f}"
        return "\n".join(
            [
                f"SLO: {s}",
                f"request throughput:            {sc.request_throughput:.2f} req/s",
                f"per-request goodput (vLLM):    {rg} req/s",
                f"p99 gate goodput (the SLO lesson's score): {sc.gate_goodput:.2f} req/s "
                f"({'meets' if sc.meets_slo else 'violates'} the SLO)",
                sc.why_they_differ(a.lang),
            ]
        )

    _print(data, a.format, text)


def cmd_diagnose(a: argparse.Namespace) -> None:
    if a.mermaid:
        print(diagnose.mermaid(a.lang))
        return
    if not a.metrics:
        raise ValueError("diagnose needs --metrics SERIES.jsonl (samples taken under load)")
    s = slo.SLO.parse(a.slo)
    samples = metrics.load_series(a.metrics)
    if not samples:
        raise ValueError(f"{a.metrics}: no samples")
    bench = slo.BenchResult.from_json(a.bench) if a.bench else None
    th = diagnose.Thresholds(**dict((k, float(v)) for k, v in (_kv(x) for x in a.threshold)))
    d = diagnose.diagnose(samples, bench, s, th, max_num_seqs=a.max_num_seqs)
    _print(d.as_dict(), a.format, lambda: d.why(a.lang))


def cmd_replicas(a: argparse.Namespace) -> None:
    plan = replicas.plan_replicas(a.knee_low, a.knee_high, a.target, a.headroom)
    _print(plan.as_dict(), a.format, lambda: plan.text(a.lang))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m course_utils", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--format", choices=("text", "json"), default="text")
        sp.add_argument("--lang", choices=("en", "zh"), default="en")

    k = sub.add_parser("knobs", help="the direction map, defaults, recommend, validate")
    common(k)
    k.add_argument("--gpu-memory-gib", type=float, default=24.0)
    k.add_argument("--entry", choices=("serve", "llm"), default="serve")
    k.add_argument("--goal", choices=("throughput", "ttft", "itl", "capacity"))
    k.add_argument("--validate", nargs="+", metavar="KNOB=VALUE")
    k.set_defaults(func=cmd_knobs)

    c = sub.add_parser("capacity", help="weights, KV tokens, concurrency, TPOT floor")
    common(c)
    c.add_argument(
        "--model", default="qwen2.5-7b-instruct", help="a shipped name, or any config.json / folder"
    )
    c.add_argument("--kv-memory-gib", type=float)
    which = c.add_mutually_exclusive_group()
    which.add_argument("--gpu", choices=sorted(capacity.GPUS))
    which.add_argument(
        "--gpu-total-gib",
        type=float,
        help="any GPU: the total CUDA reports (torch.cuda.mem_get_info()[1] / 2**30)",
    )
    c.add_argument("--entry", choices=("serve", "llm"), default="serve", help="whose defaults")
    c.add_argument("--max-num-seqs", type=int, default=None, help="default: the GPU's")
    c.add_argument("--max-num-batched-tokens", type=int, default=None, help="default: the GPU's")
    c.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    c.add_argument("--max-model-len", type=int, default=4096)
    c.add_argument("--kv-dtype", default="auto")
    c.add_argument(
        "--overhead-gib", type=float, default=None, help="replace activation + non-torch"
    )
    c.set_defaults(func=cmd_capacity)

    g = sub.add_parser("goodput", help="both goodput scores of a vllm bench serve result")
    common(g)
    g.add_argument("--bench", required=True, help="result JSON from vllm bench serve --save-result")
    g.add_argument("--slo", required=True, help='e.g. "ttft:300 tpot:50"')
    g.set_defaults(func=cmd_goodput)

    d = sub.add_parser("diagnose", help="the binding constraint from /metrics sampled under load")
    common(d)
    d.add_argument("--metrics", help="JSONL series written by MetricsSampler")
    d.add_argument("--bench", help="result JSON of the same load")
    d.add_argument("--slo", default="ttft:300 tpot:50")
    d.add_argument("--max-num-seqs", type=int)
    d.add_argument("--threshold", nargs="*", default=[], metavar="NAME=VALUE")
    d.add_argument("--mermaid", action="store_true", help="print the tree as Mermaid")
    d.set_defaults(func=cmd_diagnose)

    r = sub.add_parser("replicas", help="replicas a target rate needs, from one replica's knee")
    common(r)
    r.add_argument(
        "--knee-low", type=float, required=True, help="highest rate that met the SLO (req/s)"
    )
    r.add_argument(
        "--knee-high", type=float, default=None, help="lowest rate above it that missed (req/s)"
    )
    r.add_argument("--target", type=float, required=True, help="the rate to serve (req/s)")
    r.add_argument(
        "--headroom", type=float, default=0.2, help="share of each replica's knee kept free"
    )
    r.set_defaults(func=cmd_replicas)

    lab_cli.add_cli(sub)
    lab_workload.add_parser(sub)
    quiz.add_cli(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        rc = a.func(a)
    except (ValueError, OSError, TypeError) as e:  # KnobError, SLOError, BenchResultError...
        for line in str(e).splitlines() or [""]:  # a PreflightError: one line per check
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C, or `timeout --signal=INT` around a GPU call
        out = getattr(a, "out", None)
        where = f" in {out}/points.jsonl" if out else ""
        print(
            f"interrupted: finished points stay{where}; the same command resumes from them "
            "(the point in progress is measured again)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m course_utils <verb>``: the course's modules from a terminal, one verb tree.

knobs, capacity, goodput, diagnose, replicas (each with ``--format json``) here; sweep, tune,
knee, preflight (lab.cli), replay, grid, modelfolder, workload, scaleout and quiz from the modules
that own them. Bad input: one line ``error: <what> → fix: <how>`` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from course_utils import quiz
from course_utils.core import capacity, diagnose, knobs, metrics, replicas, slo
from course_utils.core import validate as v
from course_utils.core.records import KNEE_FILE
from course_utils.core.store import POINTS_FILE
from course_utils.core.validate import EXIT_BAD_INPUT, BadInput, error_line
from course_utils.lab import cli as lab_cli
from course_utils.lab import grid, modelfolder, replay, scaleout
from course_utils.lab import workload as lab_workload

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
        values: dict[str, str] = {}
        for x in a.validate:
            k, val = v.parse_kv(x, "--validate")
            if k in values:
                raise BadInput(f"--validate: {k} given twice", "give each knob once")
            values[k] = val
        checked = v.check_knobs(
            values, "--validate", gpu_memory_gib=a.gpu_memory_gib, entry=a.entry
        )
        args = knobs.to_cli_args(checked)
        _print({"valid": checked, "args": args}, a.format, lambda: "ok: " + " ".join(args))
        return
    if a.goal:
        ks = knobs.recommend(a.goal)
        _print([k.name for k in ks], a.format, lambda: "\n".join(k.flag for k in ks))
        return
    data = []
    for kn in knobs.KNOBS.values():
        d = {c: getattr(kn, c) for c in ("name", "flag", "kwarg", "config", "source", "group")}
        d["default"] = knobs.default(kn.name, gpu_memory_gib=a.gpu_memory_gib, entry=a.entry)
        d |= {c: getattr(kn, c) for c in ("throughput", "ttft", "itl", "relieves")}
        data.append(d | {"move": kn.move[a.lang], "trade": kn.trade[a.lang]})
    _print(data, a.format, lambda: _table(knobs.table(a.lang, a.gpu_memory_gib, a.entry)))


def _capacity_knobs(a: argparse.Namespace, gpu: Any) -> None:
    """The knob flags of ``capacity`` by vLLM's rules (the pair rule with the GPU's defaults)."""
    given = {
        k: getattr(a, k)
        for k in ("max_num_seqs", "max_num_batched_tokens")
        if getattr(a, k) is not None
    }
    if gpu is not None and given:
        total = gpu if isinstance(gpu, float) else capacity.get_gpu(gpu).memory_gib
        name = "" if isinstance(gpu, float) else gpu
        flag = "--max-num-seqs/--max-num-batched-tokens"
        v.check_knobs(given, flag, gpu_memory_gib=total, entry=a.entry, gpu_name=name)


def cmd_capacity(a: argparse.Namespace) -> None:
    _capacity_knobs(a, a.gpu_total_gib or a.gpu)
    try:
        shape = capacity.load_model(a.model)
    except (ValueError, OSError) as exc:
        raise BadInput(f"--model: {exc}", "give a shipped name or a config.json / folder") from None
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


def _slo(text: str, flag: str = "--slo") -> slo.SLO:
    try:
        return slo.SLO.parse(text)
    except slo.SLOError as exc:
        raise BadInput(f"{flag} {text!r}: {exc}", 'write e.g. --slo "ttft:300 tpot:50"') from None


def _bench(path: str, flag: str = "--bench") -> slo.BenchResult:
    try:
        r = slo.BenchResult.from_json(path)
    except (slo.BenchResultError, OSError, UnicodeDecodeError) as exc:
        fix = "give the JSON `vllm bench serve --save-result` wrote"
        raise BadInput(f"{flag}: {exc}", fix) from None
    try:
        slo.check_complete(r)
    except slo.BenchResultError as exc:
        raise BadInput(f"{flag}: {exc}", "give a finished, unedited result file") from None
    return r


def cmd_goodput(a: argparse.Namespace) -> None:
    s = _slo(a.slo)
    r = _bench(a.bench)
    sc = slo.score(r, s)
    keys = ("request_throughput", "gate_goodput", "request_goodput", "request_goodput_source")
    data = {"slo": str(s), **{k: getattr(sc, k) for k in (*keys, "meets_slo", "violations")}}
    data["why_they_differ"] = sc.why_they_differ(a.lang)

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
        raise BadInput("no --metrics given", "give --metrics SERIES.jsonl (sampled under load)")
    s = _slo(a.slo)
    th = _thresholds(a.threshold)
    samples = _series(a.metrics)
    bench = _bench(a.bench) if a.bench else None
    d = diagnose.diagnose(samples, bench, s, th, max_num_seqs=a.max_num_seqs)
    _print(d.as_dict(), a.format, lambda: d.why(a.lang))


def _thresholds(items: Sequence[str]) -> diagnose.Thresholds:
    known = set(diagnose.Thresholds.__dataclass_fields__)
    kw: dict[str, float] = {}
    for item in items:
        k, val = v.parse_kv(item, "--threshold")
        if k not in known:
            raise BadInput(f"--threshold: unknown {k!r}", f"use one of {', '.join(sorted(known))}")
        try:
            kw[k] = float(v.positive_float(val))
        except argparse.ArgumentTypeError as exc:
            raise BadInput(f"--threshold {k}: {exc}", "give a number > 0") from None
    return diagnose.Thresholds(**kw)


def _series(path: str) -> list[Any]:
    """A /metrics series (MetricsSampler JSONL), checked: a file whose lines are samples."""
    from pathlib import Path

    from course_utils.core.store import read_records

    p = Path(path)
    if not p.exists() and not p.with_name(p.name + ".gz").exists():
        raise BadInput(f"--metrics {path}: no such file", "give the series a run saved")
    recs = read_records(p)
    if not recs:
        raise BadInput(f"--metrics {path}: no samples", "give a series sampled under load")
    fix = "give --metrics the metrics*.jsonl and --bench the bench JSON"
    if not all("t" in r and isinstance(r.get("values"), dict) for r in recs):
        raise BadInput(f"--metrics {path}: not a /metrics series (is it the bench JSON?)", fix)
    try:
        return metrics.load_series(path)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"--metrics {path}: not a /metrics series ({exc})", fix) from None


def cmd_replicas(a: argparse.Namespace) -> None:
    plan = replicas.plan_replicas(a.knee_low, a.knee_high, a.target, a.headroom)
    _print(plan.as_dict(), a.format, lambda: plan.text(a.lang))


def build_parser() -> argparse.ArgumentParser:
    p = v.CourseArgumentParser(prog="python -m course_utils", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--format", choices=("text", "json"), default="text")
        sp.add_argument("--lang", choices=("en", "zh"), default="en")

    k = sub.add_parser("knobs", help="the direction map, defaults, recommend, validate")
    common(k)
    k.add_argument("--gpu-memory-gib", type=v.positive_float, default=24.0)
    k.add_argument("--entry", choices=("serve", "llm"), default="serve")
    k.add_argument("--goal", choices=("throughput", "ttft", "itl", "capacity"))
    k.add_argument("--validate", nargs="+", metavar="KNOB=VALUE")
    k.set_defaults(func=cmd_knobs)

    c = sub.add_parser("capacity", help="weights, KV tokens, concurrency, TPOT floor")
    common(c)
    c.add_argument(
        "--model", default="qwen2.5-7b-instruct", help="a shipped name, or any config.json / folder"
    )
    c.add_argument("--kv-memory-gib", type=v.positive_float)
    which = c.add_mutually_exclusive_group()
    which.add_argument("--gpu", type=lab_cli.gpu_name, help=lab_cli.GPU_HELP)
    which.add_argument(
        "--gpu-total-gib",
        type=v.positive_float,
        help="any GPU: the total CUDA reports (torch.cuda.mem_get_info()[1] / 2**30)",
    )
    c.add_argument("--entry", choices=("serve", "llm"), default="serve", help="whose defaults")
    for knob, default in (
        ("max_num_seqs", None),
        ("max_num_batched_tokens", None),
        ("gpu_memory_utilization", 0.92),
    ):
        what = "default: the GPU's" if default is None else None
        c.add_argument(
            "--" + knob.replace("_", "-"), type=v.knob_arg(knob), default=default, help=what
        )
    c.add_argument("--max-model-len", type=v.knob_arg("max_model_len", auto=False), default=4096)
    c.add_argument("--kv-dtype", default="auto", choices=capacity.DTYPE_BYTES)
    c.add_argument("--overhead-gib", type=v.non_negative_float, help="activation + non-torch")
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
    d.add_argument("--max-num-seqs", type=v.knob_arg("max_num_seqs"))
    d.add_argument("--threshold", nargs="*", default=[], metavar="NAME=VALUE")
    d.add_argument("--mermaid", action="store_true", help="print the tree as Mermaid")
    d.set_defaults(func=cmd_diagnose)

    r = sub.add_parser("replicas", help="replicas a target rate needs, from one replica's knee")
    common(r)
    rate = v.positive_float
    r.add_argument(
        "--knee-low", type=rate, required=True, help="the highest req/s that met the SLO"
    )
    r.add_argument("--knee-high", type=rate, help="lowest rate above it that missed (req/s)")
    r.add_argument("--target", type=rate, required=True, help="the rate to serve (req/s)")
    r.add_argument(
        "--headroom", type=v.share_below_one, default=0.2, help="share of each knee kept free"
    )
    r.set_defaults(func=cmd_replicas)

    lab_cli.add_cli(sub)
    replay.add_cli(sub)
    grid.add_cli(sub)
    modelfolder.add_cli(sub)
    lab_workload.add_parser(sub)
    scaleout.add_cli(sub)
    quiz.add_cli(sub)
    return p


def report(exc: BaseException, fix: str = "") -> None:
    """Bad input on stderr: a preflight's other failed checks as "✗" lines, then THE line."""
    lines = [x for x in str(exc).splitlines() if x.strip()] or [type(exc).__name__]
    for line in lines[:-1]:
        print(f"  ✗ {line}", file=sys.stderr)
    last = lines[-1]
    if len(lines) > 1:
        what, arrow, how = last.partition(" → ")
        last = f"{what} (and {len(lines) - 1} more above){arrow and ' → '}{how}"
    print(error_line(last, fix), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    a: argparse.Namespace | None = None
    try:
        a = build_parser().parse_args(argv)
        rc = a.func(a)
    except SystemExit as e:  # --help, or a message raised as SystemExit
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        report(ValueError(str(e.code)))
        return EXIT_BAD_INPUT
    except (ValueError, OSError, TypeError) as e:  # BadInput, KnobError, SLOError, ...
        report(e)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C, or `timeout --signal=INT` around a GPU call
        out, cmd = getattr(a, "out", None), getattr(a, "cmd", "")
        knee = f"{getattr(a, 'config', '')}/{KNEE_FILE}"
        file = {"sweep": POINTS_FILE, "tune": POINTS_FILE, "knee": KNEE_FILE, "scaleout": knee}
        where = f" in {out}/{file[cmd]}" if out and cmd in file else ""
        print(
            f"interrupted: finished points stay{where}; the same command resumes from them "
            "(the point in progress is measured again)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())

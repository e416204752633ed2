"""Lab 03: one GPU, two replicas (``vllm serve --data-parallel-size 2``) or one model split
over two GPUs (``--tensor-parallel-size 2``), each as a short offered-rate scan.

vLLM does the scaling: with ``--data-parallel-size 2`` one ``vllm serve`` starts two engines
(one per GPU) behind one endpoint and balances the requests itself (the DP client picks the
engine with the lowest ``waiting * 4 + running``: ``DPLBAsyncMPClient.
get_core_engine_for_request`` in vllm/v1/engine/core_client.py); with
``--tensor-parallel-size 2`` one engine runs every layer split over two GPU workers. No
router is written here.

One config per call: ``knee_scan`` (the same ``measure()`` and validity gate as lab 02) on
``RUN/scaleout/<config>/``: ``knee.jsonl`` (one ``ServedPoint`` per rate, each window with
each engine's load and diagnosis), ``knee/rate-<r>/`` (bench results, /metrics series per
window, per engine inside), ``knee/serve.log``, and ``scaleout.jsonl`` (one ``ScaleoutRun``
per call). Finished rates are skipped, so a call cut by its time budget resumes.

    python -m course_utils scaleout --config dp2 --model M --out RUN/scaleout \\
        --rates 80,100,120 --budget-s 420 --load-format dummy
"""

from __future__ import annotations

import argparse
import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import validate as v
from course_utils.core.keep import pick_knee
from course_utils.core.records import Workload, append_jsonl, read_jsonl
from course_utils.core.scaleout import CONFIGS, RUN_FILE, ScaleoutRun, config, config_records
from course_utils.core.slo import SLO
from course_utils.core.validate import BadInput, process_kwargs
from course_utils.core.vllm_logs import startup_by_process
from course_utils.lab.knee import KNEE_FILE, knee_scan, latest_by_rate, rate_key
from course_utils.lab.measure import MeasureConfig

__all__ = ["DEFAULT_WINDOW_S", "add_cli", "load_config", "run_config"]

# each rate's window lasts ~10 s of arrivals (ceil(rate x 10) prompts): lab 02's 600 prompts
# at 60 req/s, the same length at every rate and in every config
DEFAULT_WINDOW_S = 10.0
# a server start the budget must leave room for before the first rate (the H200 took 60-136 s
# for one GPU; two engines or two workers start in parallel, plus NCCL set-up for TP)
STARTUP_ESTIMATE_S = 150.0
# a rate's cost before one is measured: warm-up + window, each `vllm bench serve` paying ~20 s
# of import on the H200, plus ~15 s of arrivals and the drain (knee_scan then uses the longest)
RATE_ESTIMATE_S = 90.0


def load_config(out: str | Path, name: str) -> tuple[list[dict[str, Any]], ScaleoutRun | None]:
    """A config's knee records (the last per rate) and its last ``ScaleoutRun`` on disk."""
    runs = read_jsonl(Path(out) / config(name).name / RUN_FILE)
    return config_records(out, name), ScaleoutRun.from_json(runs[-1]) if runs else None


def run_config(
    name: str,
    model: str,
    rates: Sequence[float],
    *,
    workload: Workload,
    slo: SLO,
    out: str | Path,
    budget_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    devices: str | None = None,
    base_knobs: Mapping[str, Any] | None = None,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_share: float = 0.5,
    startup_estimate_s: float = STARTUP_ESTIMATE_S,
    rate_estimate_s: float = RATE_ESTIMATE_S,
    progress: Callable[[str], None] | None = print,
) -> ScaleoutRun:
    """Scan ``rates`` with config ``name`` (one | dp2 | tp2) on one fresh server, inside
    ``budget_s`` seconds from now; returns (and appends) this call's ``ScaleoutRun``.
    ``devices``: CUDA_VISIBLE_DEVICES (default: the config's, GPU 0 or GPUs 0,1)."""
    cfg = config(name)
    t0 = time.monotonic()
    cdir = Path(out) / cfg.name
    cdir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _m: None)
    dev = devices if devices is not None else cfg.devices
    skw = dict(server_kwargs or {})
    skw["env"] = {**dict(skw.get("env") or {}), "CUDA_VISIBLE_DEVICES": dev}
    skw["extra_args"] = [*list(skw.get("extra_args") or []), *cfg.serve_args]
    deadline = None if budget_s is None else t0 + budget_s
    todo = [r for r in rates if rate_key(r) not in latest_by_rate(read_jsonl(cdir / KNEE_FILE))]
    reason = None
    if todo and budget_s is not None and budget_s < startup_estimate_s:
        reason = f"budget {budget_s:.0f} s < a server start (~{startup_estimate_s:.0f} s)"
        say(f"{name}: {reason}; nothing started")
    elif todo:
        say(f"{name}: CUDA_VISIBLE_DEVICES={dev} vllm serve ... {' '.join(cfg.serve_args)}")
        knee_scan(
            model,
            rates,
            workload=workload,
            slo=slo,
            out_dir=cdir,
            base_knobs=base_knobs,
            server_kwargs=skw,
            bench_kwargs=bench_kwargs,
            measure_config=MeasureConfig(
                repeats=0, warmup_share=warmup_share, bench_kwargs=dict(bench_kwargs or {})
            ),
            bracket_repeats=0,
            progress=say,
            deadline=deadline,
            rate_estimate_s=rate_estimate_s,
            window_s=window_s,
        )
    return _record(cfg.name, model, rates, cdir, reason, time.monotonic() - t0, skw)


def _record(
    name: str,
    model: str,
    rates: Sequence[float],
    cdir: Path,
    reason: str | None,
    elapsed: float,
    skw: Mapping[str, Any],
) -> ScaleoutRun:
    cfg = CONFIGS[name]
    recs = latest_by_rate(read_jsonl(cdir / KNEE_FILE))
    mine = [recs[rate_key(r)] for r in rates if rate_key(r) in recs]
    ok = [r for r in mine if r.get("status") == "ok"]
    failed = next((r.get("reason") for r in mine if r.get("status") != "ok"), None)
    status = "ok" if len(ok) == len(rates) else "failed" if not ok and failed else "partial"
    log = cdir / "knee" / "serve.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    starts = [float(r["startup_s"]) for r in mine if r.get("startup_s")]
    cmd = next((str(r.get("serve_cmd")) for r in reversed(mine) if r.get("serve_cmd")), "")
    run = ScaleoutRun(
        config=name,
        gpus=cfg.gpus,
        devices=str((skw.get("env") or {}).get("CUDA_VISIBLE_DEVICES", cfg.devices)),
        serve_cmd=cmd or shlex.join(["vllm", "serve", model, *cfg.serve_args]),
        rates=[float(r) for r in rates],
        done_rates=[rate_key(r) for r in rates if rate_key(r) in recs],
        status=status,
        reason=reason or (failed if status == "failed" else None),
        startup_s=starts[-1] if starts else None,
        processes={k: v.as_dict() for k, v in startup_by_process(text).items()},
        knee=pick_knee(mine),
        elapsed_s=round(elapsed, 2),
    )
    append_jsonl(cdir / RUN_FILE, run)
    return run


# ------------------------------------------------------------------------------ CLI


def _rates(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(not (math.isfinite(r) and r > 0) for r in out):
        raise BadInput(f"--rates {text!r}: not finite rates > 0 req/s", "write e.g. --rates 6,12")
    return out


def add_cli(subparsers: Any) -> None:
    """Register `scaleout`: one config's offered-rate scan (tools/gpu/run_scaleout.sh)."""
    p = subparsers.add_parser("scaleout", help="one lab 03 config's offered-rate scan")
    p.add_argument("--config", required=True, choices=sorted(CONFIGS))
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="the scale-out folder (one sub-folder a config)")
    p.add_argument("--rates", required=True, help="offered rates, req/s, e.g. 80,100,120")
    p.add_argument("--slo", default="ttft:300 tpot:50")
    p.add_argument("--input-len", type=v.positive_int, default=512)
    p.add_argument("--output-len", type=v.positive_int, default=128)
    p.add_argument("--window-s", type=v.positive_float, default=DEFAULT_WINDOW_S)
    p.add_argument("--seed", type=v.non_negative_int, default=0)
    p.add_argument(
        "--budget-s", type=v.positive_float, default=None, help="seconds this call may take"
    )
    p.add_argument("--devices", default=None, help="CUDA_VISIBLE_DEVICES (default: the config's)")
    p.add_argument(
        "--startup-estimate-s",
        type=v.non_negative_float,
        default=STARTUP_ESTIMATE_S,
        help="no server starts with less budget left than this",
    )
    p.add_argument(
        "--rate-estimate-s",
        type=v.non_negative_float,
        default=RATE_ESTIMATE_S,
        help="a rate's cost before the first is measured (no rate starts that would not fit)",
    )
    p.add_argument("--max-model-len", type=v.positive_int, default=4096)
    p.add_argument("--load-format", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--port", type=v.port, default=None)
    p.add_argument("--startup-timeout", type=v.positive_float, default=420.0)
    p.add_argument("--bench-timeout", type=v.positive_float, default=300.0)
    p.add_argument("--vllm-cmd", default="vllm")
    p.set_defaults(func=_cmd_scaleout)


def _cmd_scaleout(a: argparse.Namespace) -> int:
    rates = _rates(a.rates)
    slo = SLO.parse(a.slo)
    n = max(1, math.ceil(max(rates) * a.window_s))
    wl = Workload(a.input_len, a.output_len, num_prompts=n, seed=a.seed, ignore_eos=True)
    skw, bkw = process_kwargs(a)
    run = run_config(
        a.config,
        a.model,
        rates,
        workload=wl,
        slo=slo,
        out=a.out,
        budget_s=a.budget_s,
        window_s=a.window_s,
        devices=a.devices,
        startup_estimate_s=a.startup_estimate_s,
        rate_estimate_s=a.rate_estimate_s,
        base_knobs={"max_model_len": a.max_model_len},
        server_kwargs=skw,
        bench_kwargs=bkw,
    )
    print(
        f"{run.config}: {run.status}; rates done {run.done_rates} of "
        f"{[rate_key(r) for r in run.rates]}; start-up {run.startup_s} s; "
        f"knee: {run.knee.get('why')}" + (f"; {run.reason}" if run.reason else "")
    )
    return 0 if run.status != "failed" else 1

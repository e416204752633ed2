"""Rehearse another GPU here: its memory budget and batch defaults applied to a lab's knobs
(``core.capacity.rehearse``), with this GPU's CUDA total read by one short ``torch``
subprocess (the lab's own process never holds a CUDA context).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from course_utils.core import capacity

__all__ = ["TORCH_PYTHON_ENV", "apply", "as_run", "cuda_total", "load", "save"]

# the Python with torch that reads the CUDA total (default: this one)
TORCH_PYTHON_ENV = "COURSE_UTILS_TORCH_PYTHON"
_SNIPPET = (
    "import json, torch; f, t = torch.cuda.mem_get_info(); "
    "print(json.dumps({'total': t, 'free': f, 'name': torch.cuda.get_device_name()}))"
)


def cuda_total(cache: Path | None = None, python: str | None = None) -> dict[str, Any]:
    """The CUDA total (bytes) of the first visible GPU, as vLLM reads it; kept in ``cache``."""
    if cache is not None and cache.is_file():
        return dict(json.loads(cache.read_text()))
    exe = python or os.environ.get(TORCH_PYTHON_ENV) or sys.executable
    done = subprocess.run(  # noqa: S603 - argv list
        [exe, "-c", _SNIPPET], capture_output=True, text=True, timeout=120, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        from course_utils.core.validate import BadInput

        raise BadInput(
            f"cannot read the GPU's CUDA total with torch: {err}",
            "rehearse on the GPU host (it reads that GPU's total), or name the host's GPU "
            "with --gpu to use the course's GPU table",
        )
    info = dict(json.loads(lines[-1]))
    info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(info, indent=1))
    return info


def apply(
    target: str,
    entry: str,
    base_knobs: Mapping[str, Any],
    sweeps: Mapping[str, Sequence[Any]] | None = None,
    *,
    here_total_gib: float | None = None,
    cache: Path | None = None,
) -> tuple[capacity.Rehearsal, dict[str, Any], dict[str, list[Any]]]:
    """(the rehearsal, base knobs with the target's budget and defaults, swept values with
    every gpu_memory_utilization scaled); knobs set in ``base_knobs`` win."""
    here = here_total_gib or int(cuda_total(cache)["total"]) / capacity.GIB
    r = capacity.rehearse(target, here, entry=entry, util=base_knobs.get("gpu_memory_utilization"))
    base = {**r.knobs(), **{k: v for k, v in base_knobs.items() if k != "gpu_memory_utilization"}}
    scaled = {
        k: [r.scale(v) for v in vals] if k == "gpu_memory_utilization" else list(vals)
        for k, vals in (sweeps or {}).items()
    }
    return r, base, scaled


def as_run(r: capacity.Rehearsal) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Knobs as the target would have them -> knobs for this GPU (lab 01)."""

    def run(knobs: dict[str, Any]) -> dict[str, Any]:
        mine = {k: r.scale(v) if k == "gpu_memory_utilization" else v for k, v in knobs.items()}
        return {**r.knobs(), **mine}

    return run


FILE = "rehearsal.json"


def save(r: capacity.Rehearsal, out_dir: Path) -> None:
    """The rehearsal next to a lab's results, so a replay can say what was rehearsed."""
    (Path(out_dir) / FILE).write_text(json.dumps(asdict(r), indent=1))


def load(results_dir: Path) -> capacity.Rehearsal | None:
    p = Path(results_dir) / FILE
    return capacity.Rehearsal(**json.loads(p.read_text())) if p.is_file() else None

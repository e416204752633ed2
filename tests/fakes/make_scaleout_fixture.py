#!/usr/bin/env python3
"""Make the lab 03 fixture from the fake vLLM: the three configs run by
``course_utils.lab.scaleout.run_config`` against tests/fakes/fake_vllm.py (DP: two engines,
TP: one faster engine), then shrunk by tools/gpu/collect.py like a GPU run.

    python tests/fakes/make_scaleout_fixture.py tests/fixtures/scaleout_fake

Fake numbers (a Python HTTP double, 64 in / 16 out, FAKE_VLLM_TPOT_S 0.02 so the knees sit
at a few tens of req/s): they exercise the code paths the 2-GPU run will take, they are not
course data. Rates per config: one 8,12,16,20; dp2 16,24,32; tp2 16,24,32.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RATES = {"one": [8, 12, 16, 20], "dp2": [16, 24, 32], "tp2": [16, 24, 32]}


def _exe(bindir: Path, name: str, script: Path) -> None:
    p = bindir / name
    p.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def main(dest: Path) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from course_utils.core.records import Workload
    from course_utils.core.slo import SLO
    from course_utils.lab.modelfolder import make_dummy_model_folder, stdlib_corpus
    from course_utils.lab.scaleout import run_config

    tmp = Path(tempfile.mkdtemp(prefix="scaleout-fixture-"))
    bindir = tmp / "bin"
    bindir.mkdir()
    _exe(bindir, "vllm", HERE / "fake_vllm.py")
    _exe(bindir, "nvidia-smi", HERE / "fake_nvidia_smi.py")
    os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ['PATH']}"
    os.environ["FAKE_VLLM_TPOT_S"] = "0.02"
    h200 = "NVIDIA H200,143771,143000,580.95.05"
    os.environ["FAKE_GPU"] = f"{h200};{h200}"
    model = make_dummy_model_folder(tmp / "model-fake", vocab_size=700,
                                    corpus=stdlib_corpus(200_000))
    run = tmp / "labrun"
    for name, rates in RATES.items():
        run_config(name, str(model), rates,
                   workload=Workload(input_len=64, output_len=16, num_prompts=10,
                                     ignore_eos=True),
                   slo=SLO.parse("ttft:300 tpot:50"), out=run / "scaleout", window_s=4.0,
                   startup_estimate_s=0.0, rate_estimate_s=1.0,
                   server_kwargs={"load_format": "dummy"}, bench_kwargs={"timeout_s": 120})
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run([sys.executable, str(ROOT / "tools/gpu/collect.py"), str(run), str(dest)],
                   check=True)
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/scaleout_fake")))

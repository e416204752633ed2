#!/usr/bin/env python3
"""A fake `nvidia-smi` for tests: the CSV of `--query-gpu=... --format=csv,noheader,nounits`.

FAKE_GPU: the GPUs as "name,total MiB,free MiB,driver" joined by ";" (default: one RTX 4090
with a CUDA 13 driver); FAKE_GPU_FILE: a file read at every call that holds that string instead
(a test changes what the GPUs report while a server runs); FAKE_NVIDIA_SMI_FAIL=driver prints what nvidia-smi prints without
a loaded driver (exit 9), =nogpu "No devices were found" (exit 6); FAKE_NVIDIA_SMI_CALLS=path
appends one line per call. `--query-compute-apps=pid` lists no process. `-i 1` or `-i
GPU-fake0001-...` (comma-separated, like nvidia-smi) lists only those GPUs.
"""

from __future__ import annotations

import os
import sys

DEFAULT = "NVIDIA GeForce RTX 4090,24564,24080,580.65.06"


def main(argv: list[str]) -> int:
    calls = os.environ.get("FAKE_NVIDIA_SMI_CALLS")
    if calls:
        with open(calls, "a") as fh:
            fh.write(" ".join(argv) + "\n")
    fail = os.environ.get("FAKE_NVIDIA_SMI_FAIL")
    if fail == "driver":  # nvidia-smi's own words when the kernel module is not loaded
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        return 9
    if fail == "nogpu":
        print("No devices were found")
        return 6
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:
        return 0  # --query-compute-apps=pid: no processes
    spec = os.environ.get("FAKE_GPU", DEFAULT)
    if os.environ.get("FAKE_GPU_FILE") and os.path.isfile(os.environ["FAKE_GPU_FILE"]):
        with open(os.environ["FAKE_GPU_FILE"]) as fh:
            spec = fh.read().strip()
    gpus = [g.split(",") for g in spec.split(";") if g]
    only = argv[argv.index("-i") + 1].split(",") if "-i" in argv else None
    for i, (name, total, free, driver) in enumerate(gpus):
        uuid = f"GPU-fake{i:04d}-0000-0000-0000-000000000000"
        if only is not None and str(i) not in only and uuid not in only:
            continue
        value = {"index": str(i), "uuid": uuid,
                 "name": name, "memory.total": total, "memory.free": free,
                 "memory.used": str(int(total) - int(free)), "driver_version": driver}
        print(", ".join(value[f] for f in query.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""A fake `python` with torch for the capacity probe's CUDA-total read (`python -c ...`):
prints what the snippet prints, for a GPU of FAKE_VLLM_GPU_TOTAL_BYTES (CUDA total) named
FAKE_TORCH_GPU_NAME; FAKE_TORCH_FAIL=1 fails like a host without a CUDA driver."""

import json
import os
import sys

if os.environ.get("FAKE_TORCH_FAIL"):
    print("RuntimeError: Found no NVIDIA driver on your system.", file=sys.stderr)
    sys.exit(1)
total = int(os.environ["FAKE_VLLM_GPU_TOTAL_BYTES"])
print(json.dumps({"total": total, "free": total - (512 << 20),
                  "name": os.environ.get("FAKE_TORCH_GPU_NAME", "NVIDIA H200")}))

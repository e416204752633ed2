#!/usr/bin/env python3
"""One-time migration of recorded served points to the form with windows (run and committed).

Runs recorded before a point kept its windows wrote one flat record per point or knee rate.
Each such record gains what today's form has (``windows``: its one window; ``key``, ``knob``,
``value``, ``tag``, ``startup_s`` of a knee rate, as lab.knee writes them) and keeps every key it had, as recorded. Records with
windows are left as they are; a file without a flat record is not rewritten.

    python tools/migrate_records.py [ROOT ...]          (default: labs/results)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from course_utils.core.records import Scores, ServedPoint, Window
from course_utils.core.store import read_text

POINT_FILES = ("points.jsonl", "knee.jsonl")
# the vLLM bench keys a flat knee record kept beside its scores
KNEE_BENCH = ("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "max_concurrent_requests")


def window(d: dict[str, Any]) -> Window:
    """The one window a flat record stands for."""
    score = d.get("score")
    if score is None and ("gate_goodput" in d or "meets_slo" in d):  # knee scores were flat
        score = {k: d.get(k) for k in Scores.__dataclass_fields__}
    issues = list(d.get("validity_issues") or [])
    bench = dict(d.get("bench") or {k: d[k] for k in KNEE_BENCH if k in d})
    return Window(
        index=0,
        purpose="measure",
        seed=int((d.get("workload") or {}).get("seed", 0)),
        status="ok",
        valid=bool(d.get("valid", not issues)),
        validity_issues=issues,
        prefix_cache_hit_rate=d.get("prefix_cache_hit_rate"),
        score=Scores.from_json(score) if score else None,
        bench=bench,
        load=dict(d.get("load") or {}),
        diagnosis=dict(d.get("diagnosis") or {}),
        elapsed_s=None,  # the point's time included its server start: the window's is unknown
    )


def migrate(d: dict[str, Any]) -> dict[str, Any] | None:
    """The record with windows, every recorded key kept as recorded; None when it has them."""
    if "windows" in d:
        return None
    new: dict[str, Any] = {"warmup": None}
    if d.get("rate_key") is not None and "knob" not in d:  # a knee rate
        rk = str(d["rate_key"])
        new.update(key=f"rate-{rk}", knob="rate", value=d.get("rate", rk), tag="knee")
        new.update(startup_s=d.get("server_startup_s"))
    new["windows"] = [window(d).to_json()] if d.get("status") == "ok" else []
    out = {**new, **d, "windows": new["windows"]}
    ServedPoint.from_json(out)  # reads back in today's form
    return out


def main(roots: list[str]) -> int:
    for root in roots or ["labs/results"]:
        for f in sorted(q for n in POINT_FILES for q in Path(root).rglob(n)):
            recs = [json.loads(line) for line in read_text(f).splitlines() if line.strip()]
            new = [migrate(r) for r in recs]
            if any(n is not None for n in new):
                out = [r if n is None else n for r, n in zip(recs, new, strict=True)]
                text = "".join(
                    json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in out
                )
                f.write_text(text, encoding="utf-8")
                print(f"{f}: {sum(n is not None for n in new)} record(s) migrated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

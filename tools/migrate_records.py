#!/usr/bin/env python3
"""One-time migration of recorded served points to the record form with windows.

Runs recorded before a point kept its windows (labs/results/h200-2026-11-29*) wrote one flat
record per point or knee rate. This rewrites each such record as ``ServedPoint.to_json()``
of what the older reader made of it, with every key the record had kept as recorded, so that
the readers need only one form. Records that have windows are left as they are; a file
without a legacy record is not rewritten.

    python tools/migrate_records.py [ROOT ...]          (default: labs/results)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from course_utils.core.records import Scores, ServedPoint, Window

POINT_FILES = ("points.jsonl", "knee.jsonl")


def _window(d: dict[str, Any]) -> Window:
    """The one window a record from before windows stands for (its flat fields)."""
    score = d.get("score")
    if score is None and ("gate_goodput" in d or "meets_slo" in d):  # knee scores were flat
        keys = ("gate_goodput", "request_goodput", "request_throughput", "meets_slo", "violations")
        score = {k: d.get(k) for k in keys}
    issues = list(d.get("validity_issues") or [])
    return Window(
        index=0,
        purpose="measure",
        seed=int((d.get("workload") or {}).get("seed", 0)),
        status="ok",
        valid=bool(d.get("valid", not issues)),
        validity_issues=issues,
        prefix_cache_hit_rate=d.get("prefix_cache_hit_rate"),
        score=Scores.from_json(score) if score else None,
        bench=dict(d.get("bench") or {}),
        load=dict(d.get("load") or {}),
        diagnosis=dict(d.get("diagnosis") or {}),
        elapsed_s=d.get("elapsed_s"),
    )


def migrate(d: dict[str, Any]) -> dict[str, Any] | None:
    """The record in today's form; None when it already is."""
    if "windows" in d:
        return None
    d = dict(d)
    if d.get("rate_key") is None and d.get("rate") is not None and "knob" not in d:
        d["rate_key"] = str(d["rate"])  # a knee record that kept only its rate
        d.setdefault("key", d["rate_key"])
        d.setdefault("knob", "rate")
        d.setdefault("value", d["rate"])
    if d.get("startup_s") is None and d.get("server_startup_s") is not None:
        d["startup_s"] = d["server_startup_s"]
    p = ServedPoint.from_json(d)
    p.windows = [_window(d)] if p.status == "ok" else []
    return {**p.to_json(), **d}


def main(roots: list[str]) -> int:
    for root in roots or ["labs/results"]:
        for f in sorted(q for n in POINT_FILES for q in Path(root).rglob(n)):
            recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            new = [migrate(r) for r in recs]
            if any(n is not None for n in new):
                out = [n if n is not None else r for r, n in zip(recs, new, strict=True)]
                f.write_text("".join(json.dumps(r) + "\n" for r in out))
                print(f"{f}: {sum(n is not None for n in new)} record(s) migrated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

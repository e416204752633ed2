"""Served points in the record form the labs write (``ServedPoint.to_json()``, one window),
for tests of the rules that read them (keep, knee)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from course_utils.core.records import Scores, ServedPoint, Window


def served(
    knob: str = "baseline",
    value: Any = None,
    *,
    score: Mapping[str, Any] | None = None,
    valid: bool = True,
    issues: Sequence[str] = (),
    status: str = "ok",
    rate: str | None = None,
    workload: Mapping[str, Any] | None = None,
    diagnosis: Mapping[str, Any] | None = None,
    knobs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One point measured in one window with ``score`` (Scores fields); ``rate``: a knee rate."""
    window = Window(
        index=0,
        purpose="measure",
        seed=0,
        status="ok",
        valid=valid,
        validity_issues=list(issues),
        score=None if score is None else Scores.from_json(score),
        diagnosis=dict(diagnosis or {}),
    )
    return ServedPoint(
        key=str(value if rate is None else rate),
        knob=knob if rate is None else "rate",
        value=value if rate is None else rate,
        knobs=dict(knobs or {}),
        workload=dict(workload or {}),
        slo="",
        status=status,
        rate_key=rate,
        windows=[window] if status == "ok" else [],
    ).to_json()

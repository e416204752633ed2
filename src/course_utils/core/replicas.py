"""Replica arithmetic: how many copies of a measured server a target rate needs.

One replica's knee lies between ``knee_low`` (the highest rate that met the SLO in every valid
window) and ``knee_high`` (the lowest rate above it that missed; None: none missed). Headroom
is the share of each replica's knee kept free, so a replica carries ``knee * (1 - headroom)``.
``safe`` = ``ceil(target / (knee_low * (1 - headroom)))`` replicas each run at or below a rate
measured to meet the SLO: provision this. ``short`` = the same from ``knee_high``: fewer leave
no headroom even at the knee's upper bound. Between them the data cannot tell. Replicas are
assumed to add up (N carry N times one), as vLLM's data parallelism should; lab 03 measures it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ReplicaPlan", "carried", "plan_replicas"]


@dataclass(frozen=True)
class ReplicaPlan:
    """The replicas a target rate needs, from one replica's knee range (req/s)."""

    target: float
    headroom: float
    knee_low: float
    knee_high: float | None
    per_replica_low: float  # knee_low * (1 - headroom): what each replica is planned to carry
    per_replica_high: float | None
    safe: int  # provision this many (from knee_low)
    short: int | None  # fewer than this is surely too few (from knee_high)

    @property
    def decided(self) -> bool:
        """The range is one number: the knee scan was fine enough for this target."""
        return self.short is not None and self.short == self.safe

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "decided": self.decided}

    def text(self, lang: str = "en") -> str:
        """One line: the range and which end is safe."""
        lo, hi = _r(self.knee_low), "?" if self.knee_high is None else _r(self.knee_high)
        h = f"{self.headroom:.0%}"
        if lang == "zh":
            head = f"单副本拐点在 {lo}–{hi} req/s 之间，留 {h} 余量，目标 {_r(self.target)} req/s："
            if self.short is None:
                return head + f"需要 {self.safe} 个副本（安全端，由 {lo} 算出；拐点上界未测到）"
            if self.decided:
                return head + f"需要 {self.safe} 个副本（两端一致）"
            return head + (
                f"需要 {self.short}–{self.safe} 个副本；{self.safe} 是安全端（每个副本都不超过"
                f"测得达标的 {lo} req/s），少于 {self.short} 个时即使拐点在上界也留不出余量"
            )
        head = (
            f"one replica's knee is {lo}-{hi} req/s; with {h} headroom, "
            f"{_r(self.target)} req/s needs "
        )
        if self.short is None:
            return (
                head + f"{self.safe} replica(s) (the safe end, from {lo}; no upper bound measured)"
            )
        if self.decided:
            return head + f"{self.safe} replica(s) (both ends agree)"
        return head + (
            f"{self.short}-{self.safe} replicas; {self.safe} is the safe end (no replica above "
            f"the {lo} req/s measured to meet the SLO); fewer than {self.short} cannot keep "
            "the headroom even at the knee's upper bound"
        )


def _r(x: float) -> str:
    return f"{x:g}"


def _check(knee_low: float | None, knee_high: float | None, headroom: float) -> float:
    if knee_low is None or not math.isfinite(knee_low) or knee_low <= 0:
        raise ValueError(
            "knee_low must be a rate > 0 that met the SLO (no tested rate met it: "
            "measure lower rates first)"
        )
    if knee_high is not None and not knee_high > knee_low:
        raise ValueError(f"knee_high ({knee_high:g}) must be above knee_low ({knee_low:g})")
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom must be in [0, 1), got {headroom:g}")
    return 1.0 - headroom


def plan_replicas(
    knee_low: float | None, knee_high: float | None, target: float, headroom: float = 0.2
) -> ReplicaPlan:
    """The replicas ``target`` req/s needs (see the module docstring for both ends)."""
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target must be a rate > 0 req/s, got {target:g}")
    keep = _check(knee_low, knee_high, headroom)
    assert knee_low is not None
    lo = knee_low * keep
    hi = None if knee_high is None else knee_high * keep
    return ReplicaPlan(
        target=float(target),
        headroom=float(headroom),
        knee_low=float(knee_low),
        knee_high=None if knee_high is None else float(knee_high),
        per_replica_low=lo,
        per_replica_high=hi,
        safe=_ceil(target / lo),
        short=None if hi is None else _ceil(target / hi),
    )


def _ceil(x: float) -> int:
    """ceil, forgiving float noise (200 / (50 * 0.8) is 5, not 6)."""
    return max(1, math.ceil(round(x, 9)))


def carried(
    replicas: int, knee_low: float | None, knee_high: float | None, headroom: float = 0.0
) -> tuple[float, float | None]:
    """The rate range ``replicas`` replicas carry if they add up: N times one replica's knee
    range (less the headroom). Lab 03 holds the measured DP knee against it."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    keep = _check(knee_low, knee_high, headroom)
    assert knee_low is not None
    return (
        replicas * knee_low * keep,
        None if knee_high is None else replicas * knee_high * keep,
    )

"""Replica arithmetic: range in, range out, the safe end from the rate that met the SLO."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course_utils.core.replicas import carried, plan_replicas


def test_range_in_range_out_and_the_safe_end_is_the_low_knee():
    p = plan_replicas(40, 60, target=300, headroom=0.25)
    # each replica planned at 40*0.75 = 30 (safe) .. 60*0.75 = 45 req/s
    assert (p.per_replica_low, p.per_replica_high) == (30.0, 45.0)
    assert p.safe == 10 and p.short == 7
    assert not p.decided
    t = p.text("en")
    assert "7-10 replicas" in t and "10 is the safe end" in t
    assert "7–10 个副本" in p.text("zh") and "10 是安全端" in p.text("zh")


def test_exact_multiples_do_not_round_up_on_float_noise():
    # 200 / (50 * 0.8) is 5.000000000000001 in floats; 5 replicas carry it exactly
    p = plan_replicas(50, 55, target=200, headroom=0.2)
    assert p.safe == 5 and p.short == 5 and p.decided


def test_no_upper_bound_measured_gives_only_the_safe_end():
    p = plan_replicas(50, None, target=120, headroom=0.0)
    assert p.safe == 3 and p.short is None
    assert "no upper bound" in p.text("en")


def test_headroom_raises_the_count():
    assert plan_replicas(50, 55, 100, 0.0).safe == 2
    assert plan_replicas(50, 55, 100, 0.5).safe == 4


@pytest.mark.parametrize(
    "args, msg",
    [
        ((None, 55, 100, 0.2), "no tested rate met it"),
        ((50, 50, 100, 0.2), "must be above knee_low"),
        ((50, 55, 0, 0.2), "target must be"),
        ((50, 55, 100, 1.0), "headroom must be in"),
    ],
)
def test_bad_input_says_why(args, msg):
    with pytest.raises(ValueError, match=msg):
        plan_replicas(*args)


def test_carried_is_n_times_one_replica():
    assert carried(2, 50, 55) == (100, 110)
    assert carried(2, 50, None, headroom=0.5) == (50, None)
    with pytest.raises(ValueError):
        carried(0, 50, 55)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "course_utils", "replicas", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_json_and_one_line_error():
    p = _run(
        "--knee-low",
        "50",
        "--knee-high",
        "60",
        "--target",
        "200",
        "--headroom",
        "0.2",
        "--format",
        "json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert (d["safe"], d["short"], d["decided"]) == (5, 5, True)
    bad = _run("--knee-low", "50", "--target", "200", "--headroom", "1.5")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: argument --headroom: must be in [0, 1), got 1.5 → fix: see "
        "`python -m course_utils replicas --help`"
    ]
    edge = _run("--knee-low", "50", "--target", "200", "--headroom", "1")
    assert edge.returncode == 2 and "--headroom: must be in [0, 1), got 1 " in edge.stderr

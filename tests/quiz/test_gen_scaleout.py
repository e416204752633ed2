"""The replica-count item from the recorded lab 03 run: its key follows from the cited data,
and it refuses a run that does not support one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from course_utils import quiz
from course_utils.core import scaleout

ROOT = Path(__file__).resolve().parents[2]


def _item(**params) -> quiz.Question:
    """The lesson's item (its wording) with other params."""
    raw = yaml.safe_load(quiz.quiz_path("slo-loop").read_text(encoding="utf-8"))["questions"]
    entry = next(e for e in raw if e.get("generator") == "replicas_plan")
    return quiz.expand({**entry, "params": {"target": 200, "headroom": 0.2, **params}})


def test_the_key_is_the_safe_end_of_the_recorded_one_gpu_knee() -> None:
    q = _item()  # the run core.scaleout.RUN_DIR names
    recs = scaleout.config_records(ROOT / scaleout.RUN_DIR / "scaleout", "one")
    met = [float(r["rate_key"]) for r in recs if r["valid"] and r["meets_slo"]]
    missed = [float(r["rate_key"]) for r in recs if r["valid"] and not r["meets_slo"]]
    lo = max(met)
    assert all(m > lo for m in missed)  # the recorded scan is monotone: the knee is clean
    assert q.answer == -(-200 // (lo * 0.8))  # ceil
    assert quiz.grade(q, q.answer).correct and not quiz.grade(q, q.answer - 1).correct
    assert Path(scaleout.RUN_DIR).name in q.prompt["en"]
    # more headroom, more replicas
    assert _item(headroom=0.5).answer > q.answer


def test_a_run_where_one_gpu_met_nothing_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ROOT / scaleout.RUN_DIR / "scaleout" / "one", run / "scaleout" / "one")
    knee = run / "scaleout" / "one" / "knee.jsonl"
    recs = [json.loads(x) for x in knee.read_text().splitlines()]
    for r in recs:
        for w in r["windows"]:
            w["score"]["meets_slo"] = False
    knee.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(quiz.QuizError, match="no one-GPU rate met the SLO"):
        _item(run=str(run))
    (tmp_path / "empty").mkdir()
    with pytest.raises(quiz.QuizError, match="no one-GPU knee scan"):
        _item(run=str(tmp_path / "empty"))

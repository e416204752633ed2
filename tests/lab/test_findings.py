"""Two lab 02 runs on two workloads, side by side: knee, binding constraint, kept knobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_utils.core.keep import compare_findings
from course_utils.lab.replay import run_findings

RESULTS = Path(__file__).resolve().parents[2] / "labs" / "results"


def test_findings_of_a_recorded_run() -> None:
    f = run_findings(RESULTS / "h200-2026-11-29c/slo")
    assert f["knee"] == [50.0, 55.0] and f["rate"] == 45.0
    assert f["baseline_constraint"] == "queue" and f["outcome"] == "meets_slo"
    assert f["knobs"] == {"max_model_len": 4096, "max_num_seqs": 256}
    assert len(f["measured"]) == 3
    # vLLM's default 1024 met the SLO too and lies inside the spread: the table's "tie"
    assert f["tied_with"] == [{"max_model_len": 4096, "max_num_seqs": 1024}]


def test_two_recorded_runs_compared() -> None:
    h200 = run_findings(RESULTS / "h200-2026-11-29c/slo")
    rehearsed = run_findings(RESULTS / "h200-2026-12-02/lab02-4090")
    assert rehearsed["knee"] == [10.0, None]  # every rate met the SLO: the knee lies above
    assert compare_findings(h200, rehearsed) == {
        "knee": "overlaps", "constraint": "differs", "kept": "undecided"}


def _f(knee, constraint, knobs, measured=(), tied=()) -> dict:
    return {"knee": knee, "baseline_constraint": constraint, "knobs": knobs,
            "measured": [knobs, *measured], "tied_with": list(tied)}


A, B = {"max_num_seqs": 256}, {"max_num_seqs": 512}


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (_f([16, 24], "prefill", A), _f([16, 32], "prefill", A),
         {"knee": "overlaps", "constraint": "same", "kept": "same"}),
        (_f([16, 24], "prefill", A, [B], [B]), _f([24, 32], "kv", B, [A], [A]),
         {"knee": "differs", "constraint": "differs", "kept": "tie"}),
        (_f([16, 24], "queue", A, [B]), _f([8, None], "queue", B, [A]),
         {"knee": "overlaps", "constraint": "same", "kept": "differs"}),
        (_f([None, 8], "queue", A), _f([16, 24], "queue", B),
         {"knee": "undecided", "constraint": "same", "kept": "undecided"}),
        (_f([16, 24], "queue", A, [B], [B]), _f([16, 24], "queue", B, [A]),
         {"knee": "overlaps", "constraint": "same", "kept": "differs"}),
        # a run whose loop did not run: its knee compares, the rest is undecided
        (_f([16, 32], "none", A), {**_f([40, None], None, None), "measured": []},
         {"knee": "differs", "constraint": "undecided", "kept": "undecided"}),
    ],
)
def test_compare_findings(a: dict, b: dict, want: dict) -> None:
    assert compare_findings(a, b) == want


def test_cli_replay_against(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from course_utils.__main__ import main

    a, b = RESULTS / "h200-2026-11-29c/slo", RESULTS / "h200-2026-12-02/lab02-4090"
    assert main(["replay", str(a), "--against", str(b)]) == 0
    out = capsys.readouterr().out
    assert "binding at the start: queue" in out and "knee: overlaps" in out
    # a folder whose loop did not run (only its knee scan): the knee compared, the rest undecided
    (tmp_path / "knee.jsonl").write_text((a / "knee.jsonl").read_text())
    assert main(["replay", str(a), "--against", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "b: knee [50.0, 55.0], loop not run" in out
    assert "knee: overlaps; constraint: undecided; kept: undecided" in out
    # a folder with neither: one line, exit 2, before anything is read
    (tmp_path / "knee.jsonl").unlink()
    (tmp_path / "points.jsonl").write_text((a / "points.jsonl").read_text())
    assert main(["replay", str(a), "--against", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "→ fix: " in err[0]

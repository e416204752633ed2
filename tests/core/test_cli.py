import json
import subprocess
import sys

import pytest

from course_utils.core import metrics
from tests.core.benchjson import make_result
from tests.core.promtext import series


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course_utils", *args], capture_output=True,
                          text=True, timeout=60)


def test_knobs_json_defaults_for_a_24_gib_gpu():
    p = run("knobs", "--gpu-memory-gib", "24", "--entry", "serve", "--format", "json")
    assert p.returncode == 0
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert rows["max_num_seqs"]["default"] == 256
    assert rows["max_num_batched_tokens"]["default"] == 2048


def test_capacity_reproduces_the_h200_log():
    p = run("capacity", "--model", "qwen2.5-7b-instruct", "--kv-memory-gib", "110.18",
            "--format", "json")
    d = json.loads(p.stdout)
    assert abs(d["kv_tokens"] - 2_063_088) / 2_063_088 < 0.01
    assert d["max_concurrency"] == pytest.approx(503.68, rel=0.01)


def test_goodput_prints_both_scores(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(make_result([0.1] * 97 + [0.9] * 3, 0.02,
                                        goodput_slo={"ttft": 300, "tpot": 50})))
    p = run("goodput", "--bench", str(f), "--slo", "ttft:300 tpot:50")
    assert p.returncode == 0, p.stderr
    assert "per-request goodput (vLLM):    9.70" in p.stdout
    assert "p99 gate goodput (the SLO lesson's score): 0.00" in p.stdout


def test_diagnose_from_a_saved_series(tmp_path):
    s = metrics.save_series(series(waiting=30, running=16, kv=0.1), tmp_path / "m.jsonl")
    p = run("diagnose", "--metrics", str(s), "--max-num-seqs", "16", "--format", "json")
    assert json.loads(p.stdout)["constraint"] == "queue"
    assert run("diagnose", "--mermaid").stdout.startswith("flowchart TB")


@pytest.mark.parametrize("args, msg", [
    (("knobs", "--validate", "max_num_seqz=4"), "unknown knob"),
    (("knobs", "--validate", "max_num_seqs=512", "max_num_batched_tokens=256"), "must be >="),
    (("goodput", "--bench", "{bench}", "--slo", "ttft=300"), "KEY:VALUE"),
    (("goodput", "--bench", "{notvllm}", "--slo", "ttft:300"), "not a vLLM 0.26.0 bench result"),
])
def test_bad_input_one_line_and_nonzero_exit(tmp_path, args, msg):
    good = tmp_path / "r.json"
    good.write_text(json.dumps(make_result([0.1] * 5, 0.02)))
    bad = tmp_path / "n.json"
    bad.write_text(json.dumps({"hello": 1}))
    args = [a.format(bench=good, notvllm=bad) for a in args]
    p = run(*args)
    assert p.returncode == 2
    assert msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_goodput_on_the_real_h200_result_shows_both_scores_differ():
    from tests.core import examples

    bench = examples.folder("queue_cap") / "bench.json"
    p = run("goodput", "--bench", str(bench), "--slo", "ttft:300 tpot:50", "--format", "json")
    d = json.loads(p.stdout)
    assert d["gate_goodput"] == 0 and not d["meets_slo"]
    assert d["request_goodput"] > 0 and d["request_goodput_source"] == "vllm"
    assert "p99 TTFT" in d["violations"][0]


def test_capacity_for_any_gpu_and_any_config_json():
    from pathlib import Path

    from course_utils.core import capacity

    cfg = Path(__file__).resolve().parents[2] / "labs/data/models/llama-3-8b-instruct"
    p = run("capacity", "--model", str(cfg / "config.json"), "--gpu-total-gib", "23.64",
            "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    want = capacity.predict(capacity.load_model(str(cfg)), capacity.custom_gpu(23.64))
    assert d["fit"]["kv_tokens"] == want.kv_tokens and d["kv_bytes_per_token"] == 131072
    assert (d["fit"]["max_num_seqs"], d["fit"]["max_num_batched_tokens"]) == (256, 2048)
    assert "tpot_floor_ms_batch1" not in d  # no bandwidth for a GPU known by its total only
    p = run("capacity", "--gpu", "rtx4090", "--entry", "llm", "--format", "json")
    assert json.loads(p.stdout)["fit"]["max_num_batched_tokens"] == 8192
    p = run("capacity", "--gpu", "rtx4090", "--gpu-total-gib", "24")
    assert p.returncode == 2 and "not allowed with argument" in p.stderr

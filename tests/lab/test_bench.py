"""bench: the `vllm bench serve` argv (0.26.0 flags only), the fake's result keys, validity."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from course_utils.core.slo import SLO
from course_utils.core.validity import validity_issues
from course_utils.lab.bench import (
    BenchError,
    Workload,
    bench_args,
    run_bench,
)
from course_utils.lab.server import VllmServer

FAKES = Path(__file__).resolve().parents[1] / "fakes"
VLLM_FILES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_0_26_0"
FLAGS = {ln.strip() for ln in (FAKES / "vllm_0_26_0_bench_serve_flags.txt").read_text().splitlines()
         if ln.strip() and not ln.startswith("#")}

# vllm/benchmarks/serve.py (0.26.0): main_async() result_json set-up keys, then benchmark()'s
# `result` for generation, then process_one_metric() keys per --percentile-metrics.
SETUP_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts", "request_rate", "burstiness", "max_concurrency"]
BENCH_KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
              "request_throughput", "request_goodput", "output_throughput",
              "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
              "start_times", "generated_texts", "errors", "max_output_tokens_per_s",
              "max_concurrent_requests", "rtfx"]
METRIC_KEYS = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
               for s in ("mean", "median", "std", "p50", "p90", "p99")]


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_bench_args_exact() -> None:
    w = Workload(input_len=512, output_len=128, num_prompts=200, request_rate=20)
    argv = bench_args("http://127.0.0.1:8000", "Qwen/Qwen2.5-7B-Instruct", w,
                      SLO.parse("ttft:300 tpot:50"), "/r", "p.json")
    assert argv == [
        "vllm", "bench", "serve", "--backend", "vllm", "--base-url", "http://127.0.0.1:8000",
        "--endpoint", "/v1/completions", "--model", "Qwen/Qwen2.5-7B-Instruct",
        "--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "128",
        "--num-prompts", "200", "--request-rate", "20",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--goodput", "ttft:300", "tpot:50", "--save-result", "--result-dir", "/r",
        "--result-filename", "p.json", "--seed", "0", "--save-detailed", "--disable-tqdm",
    ]


def test_bench_args_options() -> None:
    w = Workload(input_len=1024, output_len=64, num_prompts=10, prefix_len=768,
                 ignore_eos=True, max_concurrency=32, seed=3)
    slo = SLO(ttft_ms=300, itl_ms=40, percentile=95)  # ITL is not a --goodput key in 0.26.0
    argv = bench_args("http://h:1/", "m", w, slo, "d", "f.json", tokenizer="/tok", num_warmups=4)
    assert argv[argv.index("--random-input-len") + 1] == "256"  # 1024 total - 768 shared
    assert argv[argv.index("--random-prefix-len") + 1] == "768"
    assert argv[argv.index("--request-rate") + 1] == "inf"
    assert argv[argv.index("--max-concurrency") + 1] == "32"
    assert argv[argv.index("--goodput") + 1:argv.index("--goodput") + 3] == ["ttft:300",
                                                                              "--save-result"]
    assert argv[argv.index("--metric-percentiles") + 1] == "50,90,95,99"
    assert argv[argv.index("--base-url") + 1] == "http://h:1"
    for flag, val in (("--tokenizer", "/tok"), ("--num-warmups", "4"), ("--seed", "3")):
        assert argv[argv.index(flag) + 1] == val
    assert "--ignore-eos" in argv
    assert "--goodput" not in bench_args("u", "m", w, None)


def test_every_flag_exists_in_vllm_0_26_0() -> None:
    w = Workload(prefix_len=8, ignore_eos=True, max_concurrency=4, request_rate=5)
    argv = bench_args("u", "m", w, SLO.parse("ttft:1 tpot:1 e2el:9"), "d", "f",
                      tokenizer="t", num_warmups=1)
    assert set(_flags(argv)) <= FLAGS, set(_flags(argv)) - FLAGS


def _vllm_file(name: str) -> str:
    """A vLLM 0.26.0 source file, checked against the wheel's RECORD (sha256 and size)."""
    import base64
    import gzip
    import hashlib

    data = gzip.decompress((VLLM_FILES / f"{Path(name).name}.gz").read_bytes())
    record = {ln.split(",")[0]: ln.split(",")[1:] for ln in
              (VLLM_FILES / "RECORD").read_text().splitlines() if ln.strip()}
    digest, size = record[name]
    sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert (f"sha256={sha}", str(len(data))) == (digest, size), name
    return data.decode()


def test_flag_list_matches_vllm_source() -> None:
    serve_src = _vllm_file("vllm/benchmarks/serve.py")
    text = serve_src + _vllm_file("vllm/benchmarks/datasets/datasets.py")
    found = set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', text))
    assert found == {f for f in FLAGS if f.startswith("--")}
    for key in SETUP_KEYS + BENCH_KEYS:
        assert f'"{key}"' in serve_src, key


def test_workload_validation_and_key() -> None:
    with pytest.raises(ValueError):
        Workload(prefix_len=512, input_len=512)
    with pytest.raises(ValueError):
        Workload(request_rate=0)
    a = Workload(request_rate=math.inf)
    assert a.to_dict()["request_rate"] == "inf"
    assert Workload.from_dict(a.to_dict()) == a
    assert a.key() == Workload().key() != Workload(num_prompts=201).key()


def test_run_bench_against_the_double(tmp_path: Path, fake_vllm: Path) -> None:
    w = Workload(input_len=16, output_len=8, num_prompts=12, request_rate=200)
    slo = SLO.parse("ttft:2000 tpot:500")
    with VllmServer("fake-model", {"max_num_seqs": 4}, log_path=tmp_path / "s.log",
                    startup_timeout_s=20) as srv:
        res = run_bench(srv.base_url, "fake-model", w, slo, tmp_path, "r.json", timeout_s=60)
    raw = json.loads((tmp_path / "r.json").read_text())
    assert list(raw) == SETUP_KEYS + BENCH_KEYS + METRIC_KEYS + ["goodput_slo"]
    assert raw["goodput_slo"] == {"ttft": 2000.0, "tpot": 500.0}
    assert res.completed == 12 and res.failed == 0
    assert res.request_goodput is not None and res.request_goodput > 0
    assert res.percentile("ttft", 99) is not None
    assert validity_issues(res.raw, w) == []
    assert (tmp_path / "r.log").read_text().startswith("$ ['vllm', 'bench', 'serve'")


def test_run_bench_reports_a_failing_client(tmp_path: Path) -> None:
    w = Workload(num_prompts=2)
    with pytest.raises(BenchError) as ei:
        run_bench("http://127.0.0.1:9", "m", w, None, tmp_path, "r.json",
                  vllm_cmd=["false"], timeout_s=10)
    assert "exited with code 1" in ei.value.reason


def test_run_bench_timeout(tmp_path: Path) -> None:
    with pytest.raises(BenchError) as ei:
        run_bench("http://127.0.0.1:9", "m", Workload(num_prompts=2), None, tmp_path, "r.json",
                  vllm_cmd=["sh", "-c", "sleep 30", "x"], timeout_s=0.5)
    assert "did not finish within" in ei.value.reason


def _raw(**kw: object) -> dict:
    raw: dict = {"completed": 10, "failed": 0, "total_output_tokens": 80,
                 "start_times": [i * 0.1 for i in range(10)]}
    raw.update(kw)
    return raw


def test_validity_checks() -> None:
    w = Workload(output_len=8, num_prompts=10, request_rate=10)
    assert validity_issues(_raw(), w) == []
    issues = validity_issues(_raw(completed=7, failed=3, total_output_tokens=56), w)
    assert issues == ["3 of 10 requests failed"]
    assert "mean output 4.0 tokens/request < requested 8" in validity_issues(
        _raw(total_output_tokens=40), w)[0]
    w100 = Workload(output_len=8, num_prompts=100, request_rate=10)
    ok100 = _raw(completed=100, total_output_tokens=800, start_times=[i * 0.1 for i in range(100)])
    assert validity_issues(ok100, w100) == []
    slow = validity_issues({**ok100, "start_times": [i * 0.5 for i in range(100)]}, w100)
    assert slow == ["offered rate 2.00 req/s vs requested 10 (tolerance 30%): the client could "
                    "not keep the schedule"]
    assert validity_issues(_raw(completed=0, failed=10, total_output_tokens=0), w) == [
        "no request completed (10 failed)"]
    assert "expected num_prompts 10" in validity_issues(_raw(completed=9,
                                                             total_output_tokens=72), w)[0]

import pytest

from course_utils.core import capacity


def test_reproduces_vllm_h200_log():
    # measured-h200.md / the lab run's log: "Available KV cache memory: 110.18 GiB",
    # "GPU KV cache size: 2,063,088 tokens", "Maximum concurrency for 4,096 tokens per
    # request: 503.68x"
    m = capacity.load_model("qwen2.5-7b-instruct")
    assert m.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2
    assert m.kv_tokens(110.18) == pytest.approx(2_063_088, rel=0.01)
    assert m.max_concurrency(110.18, 4096) == pytest.approx(503.68, rel=0.01)


def test_fp8_kv_doubles_tokens_and_awq_shrinks_weights():
    m = capacity.load_model("qwen2.5-7b-instruct")
    assert m.kv_tokens(10, "fp8") == pytest.approx(2 * m.kv_tokens(10), rel=0.001)
    awq = capacity.load_model("qwen2.5-7b-instruct-awq")
    assert 4.5 < awq.weight_gib() < 6 < 13.5 < m.weight_gib() < 15


def test_fit_on_a_4090_and_roofline():
    f = capacity.fit("qwen2.5-7b-instruct-awq", "rtx4090", 0.92, 4096)
    assert f.fits and f.max_concurrency > 30
    bf16 = capacity.fit("qwen2.5-7b-instruct", "rtx4090", 0.92, 4096)
    assert bf16.kv_tokens < f.kv_tokens
    low = capacity.fit("qwen2.5-7b-instruct", "rtx4090", 0.5, 4096)
    assert not low.fits
    # batch-1 TPOT floor: weight bytes / bandwidth
    h = capacity.tpot_floor_ms("qwen2.5-7b-instruct", "h200")
    assert h == pytest.approx(capacity.load_model().weight_bytes() / 4.8e12 * 1000)
    assert capacity.tpot_floor_ms("qwen2.5-7b-instruct", "rtx4090") > 4 * h


def test_unknown_model_or_gpu():
    with pytest.raises(ValueError, match="unknown model"):
        capacity.load_model("llama-9000")
    with pytest.raises(ValueError, match="unknown GPU"):
        capacity.get_gpu("tpu")

import pytest

from course_utils.core import knobs


def test_defaults_users_get_in_0_26_0():
    # EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py)
    assert knobs.default("max_num_seqs", gpu_memory_gib=24, entry="serve") == 256
    assert knobs.default("max_num_seqs", gpu_memory_gib=140.4, entry="serve") == 1024
    assert knobs.default("max_num_batched_tokens", gpu_memory_gib=24, entry="serve") == 2048
    assert knobs.default("max_num_batched_tokens", gpu_memory_gib=24, entry="llm") == 8192
    assert knobs.default("max_num_batched_tokens", gpu_memory_gib=140.4, entry="serve") == 8192
    assert knobs.default("max_num_batched_tokens", gpu_memory_gib=140.4, entry="llm") == 16384
    # an 80 GB A100 keeps the small-GPU defaults (PR #17885 note in arg_utils.py)
    assert knobs.default("max_num_seqs", gpu_memory_gib=80, gpu_name="NVIDIA A100-SXM4-80GB") == 256
    assert knobs.default("gpu_memory_utilization") == 0.92
    assert knobs.default("enable_prefix_caching") is True


def test_every_record_is_complete_and_bilingual():
    assert set(knobs.KNOBS) == {
        "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
        "enable_chunked_prefill", "enable_prefix_caching", "quantization", "kv_cache_dtype",
        "max_model_len", "enforce_eager", "speculative_config", "tensor_parallel_size"}
    for k in knobs.KNOBS.values():
        assert k.flag.startswith("--") and k.flag[2:].replace("-", "_") == k.name
        assert k.source.startswith("vllm/") and k.config
        for field in ("label", "trade", "move"):
            assert set(getattr(k, field)) == {"en", "zh"}, (k.name, field)
        assert {k.throughput, k.ttft, k.itl} <= {"better", "worse", "neutral", "depends"}


def test_kv_cache_dtype_field_is_cache_dtype():
    assert knobs.KNOBS["kv_cache_dtype"].config == "CacheConfig.cache_dtype"


@pytest.mark.parametrize("values, msg", [
    ({"max_num_seqz": 4}, "unknown knob"),
    ({"gpu_memory_utilization": 1.5}, "(0, 1]"),
    ({"gpu_memory_utilization": "lots"}, "not a valid float"),
    ({"max_num_seqs": 0}, ">= 1"),
    ({"max_num_seqs": 2.5}, "not a valid int"),
    ({"kv_cache_dtype": "fp4"}, "not one of"),
    ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "must be >= max_num_seqs (512)"),
])
def test_bad_values_get_one_clear_line(values, msg):
    with pytest.raises(knobs.KnobError) as e:
        knobs.validate(values)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_combination_checked_against_the_defaults_a_user_gets():
    # 512 seqs on a 4090 with `vllm serve` meets the 2048-token default: fine...
    knobs.validate({"max_num_seqs": 512}, gpu_memory_gib=24)
    # ...but 4096 seqs does not.
    with pytest.raises(knobs.KnobError, match="2048"):
        knobs.validate({"max_num_seqs": 4096}, gpu_memory_gib=24)


def test_cli_args_are_an_argv_list():
    args = knobs.to_cli_args({"max_num_seqs": "128", "enable_prefix_caching": "false",
                              "enforce_eager": True, "speculative_config": '{"method":"ngram"}'})
    assert args == ["--max-num-seqs", "128", "--no-enable-prefix-caching", "--enforce-eager",
                    "--speculative-config", '{"method":"ngram"}']


def test_recommend_reads_the_direction_map():
    col = {"throughput": "throughput", "ttft": "TTFT", "itl": "ITL/TPOT"}
    rows = {r["knob"].strip("`"): r for r in knobs.table("en")}
    for goal in ("throughput", "ttft", "itl"):
        got = {k.flag for k in knobs.recommend(goal)}
        assert got == {flag for flag, r in rows.items() if r[col[goal]].startswith("✓")}
        for k in knobs.recommend(goal):  # a conditional ✓ carries its condition in the table
            assert k.condition(goal) in rows[k.flag][col[goal]]
    assert "max_num_batched_tokens" in {k.name for k in knobs.recommend("ttft")}
    assert "max_num_batched_tokens" not in {k.name for k in knobs.recommend("itl")}
    assert "gpu_memory_utilization" in {k.name for k in knobs.recommend("capacity")}
    with pytest.raises(knobs.KnobError):
        knobs.recommend("speed")


def test_free_wins_help_throughput_and_never_hurt_latency():
    wins = knobs.free_wins()
    assert {k.name for k in wins} == {"quantization", "enable_prefix_caching"}
    for k in wins:
        assert k.throughput == "better" and "worse" not in (k.ttft, k.itl)


def test_for_constraint_order_and_moves():
    assert [k.name for k, _ in knobs.for_constraint("prefill")][0] == "max_num_batched_tokens"
    assert dict((k.name, m) for k, m in knobs.for_constraint("decode"))["max_num_seqs"] == "lower"
    assert knobs.for_constraint("none") == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_table_in_both_languages(lang):
    md = knobs.table_markdown(lang=lang, gpu_memory_gib=24)
    assert md.count("\n") == len(knobs.KNOBS) + 1
    assert "`--max-num-seqs` | 256" in md
    assert ("吞吐" if lang == "zh" else "throughput") in md.splitlines()[0]


def test_unset_max_num_seqs_is_clamped_to_the_token_budget_like_vllm():
    # arg_utils._set_default_max_num_seqs_and_batched_tokens_args: min(default, budget)
    assert knobs.validate({"max_num_batched_tokens": 128}, gpu_memory_gib=24) == {
        "max_num_batched_tokens": 128}


def test_choices_are_0_26_0_literals():
    for v in ("fp8_inc", "nvfp4"):
        knobs.validate({"kv_cache_dtype": v})
    for v in ("auto_awq", "modelopt", "torchao"):
        knobs.validate({"quantization": v})


def test_cli_args_without_the_cross_knob_check():
    pair = {"max_num_seqs": 512, "max_num_batched_tokens": 256}
    with pytest.raises(knobs.KnobError):
        knobs.to_cli_args(pair)
    assert knobs.to_cli_args(pair, check=False) == [
        "--max-num-seqs", "512", "--max-num-batched-tokens", "256"]
    with pytest.raises(knobs.KnobError, match="unknown knob"):  # single-knob checks stay
        knobs.to_cli_args({"max_num_seqz": 1}, check=False)


def test_conditional_cells_say_their_condition():
    rows = {r["knob"].strip("`"): r for r in knobs.table("en")}
    assert "only when requests queue for a slot" in rows["--max-num-seqs"]["TTFT"]
    assert "KV" in rows["--gpu-memory-utilization"]["TTFT"]
    zh = {r["旋钮"].strip("`"): r for r in knobs.table("zh")}
    assert "排队等名额" in zh["--max-num-seqs"]["TTFT"]


def test_moves_include_the_reverse_direction():
    itl = {(k.name, m) for k, m, _ in knobs.moves("itl")}
    assert ("max_num_batched_tokens", "lower") in itl and ("max_num_seqs", "lower") in itl
    assert ("max_num_batched_tokens", "raise") not in itl


def test_max_model_len_is_neither_a_kv_fix_nor_a_truncation():
    k = knobs.KNOBS["max_model_len"]
    assert "kv" not in k.relieves and k.throughput == "neutral"
    assert "rejected" in k.trade["en"] and "truncate_prompt_tokens" in k.trade["en"]
    assert "max_model_len" not in {x.name for x in knobs.recommend("capacity")}


@pytest.mark.parametrize("value, want", [(-1, -1), ("-1", -1), ("auto", -1), ("AUTO", -1),
                                         (4096, 4096), ("1k", 1000), ("1K", 1024),
                                         ("25.6k", 25600), (None, None)])
def test_max_model_len_accepts_what_0_26_0_parses(value, want):
    # ModelConfig.max_model_len = Field(None, ge=-1); human_readable_int_or_auto
    assert knobs.validate({"max_model_len": value}) == {"max_model_len": want}


@pytest.mark.parametrize("value", [0, -2, "long", "1.5", True])
def test_max_model_len_rejects_the_rest(value):
    with pytest.raises(knobs.KnobError, match="max_model_len"):
        knobs.validate({"max_model_len": value})


def test_quantization_choices_include_mxfp8_and_auto_detect_is_none():
    knobs.validate({"quantization": "mxfp8"})
    assert knobs.default("quantization") is None

import re

import pytest

from course_utils.core import diagnose, knobs, slo
from course_utils.core.metrics import Histogram
from tests.core.benchjson import make_result
from tests.core.promtext import series

SLO = slo.SLO.parse("ttft:300 tpot:50")


def bench(ttft_s: float, tpot_s: float) -> slo.BenchResult:
    return slo.BenchResult.from_json(make_result([ttft_s] * 20, tpot_s=tpot_s))


def test_queue_past_the_knee_names_no_knob():
    d = diagnose.diagnose(series(waiting=40, running=300, kv=0.3), bench(5.0, 0.03), SLO,
                          max_num_seqs=1024)
    assert d.constraint == "queue" and d.leaf == "queue_replicas" and d.knobs == []
    assert d.evidence["waiting_mean"] == 40
    assert "replicas" in d.why("en") and "副本" in d.why("zh")


def test_queue_behind_the_batch_cap_names_max_num_seqs():
    d = diagnose.diagnose(series(waiting=40, running=16, kv=0.05), bench(5.0, 0.006), SLO,
                          max_num_seqs=16)
    assert (d.constraint, d.leaf, d.knobs) == ("queue", "queue_cap", ["max_num_seqs"])
    assert d.moves["max_num_seqs"] == "raise"


def test_kv_with_a_queue_and_with_preemptions():
    d = diagnose.diagnose(series(waiting=10, running=50, kv=0.97), bench(2.0, 0.03), SLO)
    assert d.constraint == "kv" and d.knobs[0] == "gpu_memory_utilization"
    d2 = diagnose.diagnose(series(waiting=0, running=50, kv=0.6, preempt=3), bench(0.1, 0.03),
                           SLO)
    assert d2.constraint == "kv" and d2.evidence["preemptions"] == 3


def test_prefill():
    d = diagnose.diagnose(series(waiting=0, running=8, kv=0.2), bench(0.6, 0.02), SLO)
    assert d.constraint == "prefill" and d.knobs[0] == "max_num_batched_tokens"
    assert d.moves["max_num_batched_tokens"] == "raise"


def test_decode():
    d = diagnose.diagnose(series(waiting=0, running=200, kv=0.4), bench(0.1, 0.08), SLO)
    assert d.constraint == "decode" and d.knobs[0] == "max_num_seqs"
    assert d.moves["max_num_seqs"] == "lower"


def test_none():
    d = diagnose.diagnose(series(waiting=0, running=20, kv=0.1), bench(0.1, 0.01), SLO)
    assert d.constraint == "none" and d.knobs == []


def test_drained_samples_alone_do_not_see_the_queue():
    ss = series(waiting=40, running=300, kv=0.3, idle_tail=4)
    assert diagnose.diagnose(ss[-4:], bench(0.1, 0.01), SLO).constraint == "none"
    assert diagnose.diagnose(ss, bench(0.1, 0.01), SLO).constraint == "queue"


def test_thresholds_are_overridable():
    ss = series(waiting=0.5, running=20, kv=0.1)
    assert diagnose.diagnose(ss, bench(0.1, 0.01), SLO).constraint == "none"
    th = diagnose.Thresholds(waiting_mean_min=0.25)
    assert diagnose.diagnose(ss, bench(0.1, 0.01), SLO, th).constraint == "queue"
    assert {r["name"] for r in diagnose.Thresholds.describe("zh")} == {
        "waiting_mean_min", "kv_full", "cap_fraction", "preemptions_min", "budget_fraction"}


def test_tree_is_well_formed_and_mermaid_follows_it():
    ids = set(diagnose.TREE)
    reachable, todo = set(), [diagnose.ROOT]
    while todo:
        n = diagnose.TREE[todo.pop()]
        reachable.add(n.id)
        if isinstance(n, diagnose.Question):
            assert n.yes in ids and n.no in ids
            todo += [n.yes, n.no]
    assert reachable == ids
    leaves = {n.constraint for n in diagnose.TREE.values() if isinstance(n, diagnose.Leaf)}
    assert leaves == {"queue", "prefill", "decode", "kv", "none"}
    src = diagnose.mermaid()
    lines = src.splitlines()
    assert lines[0] == "flowchart TB"
    node_ids = {m.group(1) for line in lines[1:] if (m := re.match(r"\s+(\w+)[\[{]\"", line))}
    edges = [re.match(r'\s+(\w+) -->\|"(yes|no)"\| (\w+)$', line) for line in lines
             if "-->" in line]
    assert node_ids == ids and all(edges) and len(edges) == 2 * sum(
        isinstance(n, diagnose.Question) for n in diagnose.TREE.values())
    for line in lines[1:]:  # balanced quotes, no raw double quote inside a label
        assert line.count('"') % 2 == 0
    # the knob flags in the picture are those of the direction map
    assert knobs.KNOBS["max_num_batched_tokens"].flag in src
    html = diagnose.mermaid_html()
    assert '<pre class="mermaid">' in getattr(html, "data", html)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_why_mentions_evidence(lang):
    d = diagnose.diagnose(series(waiting=0, running=8, kv=0.2), bench(0.6, 0.02), SLO)
    assert "p99_ttft_ms=600" in d.why(lang) and "e+" not in d.why(lang)


def with_steps(samples, tokens_per_step: float, steps_per_sample: int = 100):
    """Add vLLM's tokens-per-step histogram (vllm:iteration_tokens_total) to each sample."""
    for i, snap in enumerate(samples):
        n = float(i * steps_per_sample)
        snap.histograms[diagnose.ITERATION_TOKENS] = Histogram(
            [(8192.0, n), (16384.0, n), (float("inf"), n)], n * tokens_per_step, n)
    return samples


def test_queue_behind_a_spent_token_budget_names_max_num_batched_tokens():
    # running below the cap, KV not full, every step filled its 2048-token budget:
    # the scheduler admits waiting requests only while token_budget > 0
    ss = with_steps(series(waiting=40, running=100, kv=0.3), tokens_per_step=2040)
    d = diagnose.diagnose(ss, bench(5.0, 0.03), SLO, max_num_seqs=256,
                          max_num_batched_tokens=2048)
    assert (d.constraint, d.leaf, d.knobs) == ("queue", "queue_budget",
                                               ["max_num_batched_tokens"])
    assert d.moves["max_num_batched_tokens"] == "raise"
    assert d.evidence["tokens_per_step"] == 2040
    # the same queue with steps far below the budget is past the knee
    ss2 = with_steps(series(waiting=40, running=100, kv=0.3), tokens_per_step=300)
    d2 = diagnose.diagnose(ss2, bench(5.0, 0.03), SLO, max_num_seqs=256,
                           max_num_batched_tokens=2048)
    assert d2.leaf == "queue_replicas"
    # without the budget the question cannot say yes
    assert diagnose.diagnose(ss, bench(5.0, 0.03), SLO, max_num_seqs=256).leaf == "queue_replicas"


@pytest.mark.parametrize("lang, word", [("en", "yes"), ("zh", "是")])
def test_rows_show_each_question_with_its_numbers(lang, word):
    ss = with_steps(series(waiting=40, running=100, kv=0.3), tokens_per_step=2040)
    d = diagnose.diagnose(ss, bench(5.0, 0.03), SLO, max_num_seqs=256,
                          max_num_batched_tokens=2048)
    rows = d.rows(lang)
    assert [list(r.values())[0] for r in rows] == [
        diagnose.TREE[q].text[lang] for q, _ in d.path]
    assert "tokens_per_step=2040" in list(rows[-1].values())[2]
    assert list(rows[-1].values())[1] == word
    md = d.rows_markdown(lang)
    assert md.count("\n") == len(rows) + 1 and "max_num_batched_tokens=2048" in md


def test_kv_leaf_never_offers_max_model_len():
    # V1 allocates KV per computed token: a lower max_model_len fits no more requests
    d = diagnose.diagnose(series(waiting=10, running=50, kv=0.97), bench(2.0, 0.03), SLO)
    assert d.leaf == "kv" and "max_model_len" not in d.knobs
    assert "--max-model-len" not in diagnose.mermaid("en")


def test_zh_mermaid_labels_are_chinese():
    src = diagnose.mermaid("zh")
    labels = re.findall(r'[\[{]"([^"]*)"', src)
    assert labels and all(re.search(r"[\u4e00-\u9fff]", lab) for lab in labels)
    assert '|"是"|' in src and '|"yes"|' not in src
    assert not re.search(r"(?<![-\w])(raise|lower|enable)\b", src)
    assert "--max-num-batched-tokens 调高" in src

"""The shipped examples are real H200 records and the decision tree reads them as the lab did."""

from course_utils.core import diagnose, metrics, slo
from tests.core import examples


def test_queue_cap_example_is_a_queue_behind_the_cap():
    ex = examples.load("queue_cap")
    assert ex.meta["hardware"].startswith("1x NVIDIA H200") and ex.meta["vllm"] == "0.26.0"
    assert max(s.gauge(metrics.WAITING) or 0 for s in ex.samples) > 0
    d = diagnose.diagnose(ex.samples, ex.bench, ex.slo, max_num_seqs=ex.max_num_seqs)
    assert (d.constraint, d.leaf) == ("queue", "queue_cap")
    sc = slo.score(ex.bench, ex.slo)
    # the p99 gate says 0 while vLLM still counted good requests one by one
    assert sc.gate_goodput == 0 and sc.request_goodput > 0


def test_prefill_and_comfortable_examples():
    ex = examples.load("prefill")
    d = diagnose.diagnose(ex.samples, ex.bench, ex.slo, max_num_seqs=ex.max_num_seqs)
    assert d.constraint == "prefill" and d.knobs[0] == "max_num_batched_tokens"
    ok = examples.load("comfortable")
    d2 = diagnose.diagnose(ok.samples, ok.bench, ok.slo, max_num_seqs=ok.max_num_seqs)
    assert d2.constraint == "none" and slo.score(ok.bench, ok.slo).meets_slo
    assert "H200" in ok.label("en") and "实测" in ok.label("zh")

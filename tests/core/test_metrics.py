import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from course_utils.core import metrics as m
from tests.core.promtext import FakeEngineMetrics, series


def test_parses_vllm_exposition_and_sums_label_sets():
    e = FakeEngineMetrics()
    e.waiting.set(2)
    # a second engine (data parallel) exposes its own label set of the same gauge
    e.reg._names_to_collectors[m.WAITING].labels("qwen", "1").set(3)
    s = m.Snapshot.parse(e.text())
    assert s.gauge(m.WAITING) == 5.0 and s.gauge(m.KV_USAGE) == 0.0
    assert s.counter(m.PREEMPTIONS) == 0.0
    assert s.histogram(m.TTFT).count == 0


def test_rejects_garbage():
    with pytest.raises(m.MetricsError):
        m.Snapshot.parse("this is { not prometheus")


def test_histogram_delta_mean_and_quantile():
    ss = series(waiting=0, running=4, kv=0.2, n=4, ttft_s=0.2)
    h = ss[-1].histogram(m.TTFT).minus(ss[0].histogram(m.TTFT))
    assert h.count == 20 and h.mean == pytest.approx(0.2)
    # all observations in the (0.1, 0.3] bucket: interpolated inside it
    assert 0.1 < h.quantile(0.5) <= 0.3
    assert 0.1 < h.quantile(0.99) <= 0.3 and h.quantile(0.25) < h.quantile(0.75)
    with pytest.raises(ValueError):
        h.quantile(1.5)


def test_summary_uses_only_samples_under_load():
    ss = series(waiting=6, running=128, kv=0.5, n=8, preempt=2, queue_s=2.0, idle_tail=5)
    s = m.summarize(ss)
    assert s.n_under_load == 8 and s.waiting_mean == 6 and s.running_max == 128
    assert s.preemptions == 2 and s.queue_time_mean_s == pytest.approx(2.0)
    # drained samples alone show nothing: the reason to sample during the load
    assert m.summarize(ss[-5:]).n_under_load == 0


def test_series_roundtrip(tmp_path):
    ss = series(waiting=1, running=2, kv=0.3)
    p = m.save_series(ss, tmp_path / "s.jsonl")
    back = m.load_series(p)
    assert [x.to_dict() for x in back] == [x.to_dict() for x in ss]


def test_sampler_scrapes_a_live_endpoint():
    e = FakeEngineMetrics()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = e.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/metrics"
        with m.MetricsSampler(url, interval_s=0.05) as s:
            e.waiting.set(7)
            import time
            time.sleep(0.4)
        assert len(s.samples) >= 3 and max(x.gauge(m.WAITING) for x in s.samples) == 7
        bad = m.MetricsSampler("http://127.0.0.1:9/metrics", interval_s=0.05, timeout_s=0.2)
        with bad:
            time.sleep(0.2)
        assert bad.errors and not bad.samples
    finally:
        srv.shutdown()


# ---------------------------------------------------------------- several engines (DP)


def _two_engines(waiting: tuple[float, float], running: tuple[float, float],
                 kv: tuple[float, float]) -> str:
    """/metrics text of a server with two engines, labelled as PrometheusStatLogger does."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    reg = CollectorRegistry()
    labels = ("model_name", "engine")
    g = {n: Gauge(n, n, labels, registry=reg) for n in (m.WAITING, m.RUNNING, m.KV_USAGE)}
    c = Counter(m.PROMPT_TOKENS, "p", labels, registry=reg)
    for i in range(2):
        g[m.WAITING].labels("qwen", str(i)).set(waiting[i])
        g[m.RUNNING].labels("qwen", str(i)).set(running[i])
        g[m.KV_USAGE].labels("qwen", str(i)).set(kv[i])
        c.labels("qwen", str(i)).inc(100 * (i + 1))
    return generate_latest(reg).decode()


def test_two_engines_sum_counts_take_the_fullest_kv_and_keep_each_engine():
    snap = m.Snapshot.parse(_two_engines((3, 0), (40, 38), (0.6, 0.2)), t=1.0)
    assert snap.gauge(m.WAITING) == 3 and snap.gauge(m.RUNNING) == 78
    assert snap.gauge(m.KV_USAGE) == 0.6  # a fraction per engine: not 0.8
    assert snap.counter(m.PROMPT_TOKENS) == 300
    assert list(snap.engines) == ["0", "1"]
    assert snap.engines["0"].gauge(m.WAITING) == 3 and snap.engines["1"].gauge(m.WAITING) == 0
    assert snap.engines["1"].counter(m.PROMPT_TOKENS) == 200
    back = m.Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert back.engines["0"].gauge(m.RUNNING) == 40 and back.gauge(m.KV_USAGE) == 0.6


def test_one_engine_keeps_no_per_engine_copy():
    snap = m.Snapshot.parse(FakeEngineMetrics().text())
    assert snap.engines == {} and "engines" not in snap.to_dict()
    assert m.engine_series([snap]) == {}


def test_the_queue_diagnosis_is_per_engine():
    from course_utils.core.diagnose import busiest_engine, diagnose_engines
    from course_utils.core.slo import SLO

    samples = [m.Snapshot.parse(_two_engines((6, 0), (30, 29), (0.3, 0.3)), t=float(i))
               for i in range(5)]
    per = m.engine_series(samples)
    assert list(per) == ["0", "1"] and all(len(v) == 5 for v in per.values())
    diags = diagnose_engines(samples, None, SLO.parse("ttft:300 tpot:50"), max_num_seqs=1024)
    assert diags["0"].constraint == "queue" and diags["0"].leaf == "queue_replicas"
    assert diags["1"].constraint == "none"
    assert busiest_engine(diags) == "0"
    assert busiest_engine({}) is None
    one = [m.Snapshot.parse(FakeEngineMetrics().text())]
    assert diagnose_engines(one, None, SLO.parse("ttft:300")) == {}

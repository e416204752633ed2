"""Build /metrics text the way vLLM exposes it: prometheus_client's own exposition format,
with the metric names PrometheusStatLogger declares in 0.26.0 (vllm/v1/metrics/loggers.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from course_utils.core import metrics as m

# Bucket bounds as loggers.py uses for request-phase histograms (a subset is enough here).
BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
LABELS = ("model_name", "engine")


class FakeEngineMetrics:
    def __init__(self) -> None:
        self.reg = CollectorRegistry()
        lv = ("qwen", "0")
        self.waiting = Gauge(m.WAITING, "waiting", LABELS, registry=self.reg).labels(*lv)
        self.running = Gauge(m.RUNNING, "running", LABELS, registry=self.reg).labels(*lv)
        self.kv = Gauge(m.KV_USAGE, "kv", LABELS, registry=self.reg).labels(*lv)
        self.preempt = Counter(m.PREEMPTIONS, "preempt", LABELS, registry=self.reg).labels(*lv)
        self.h = {name: Histogram(name, name, LABELS, buckets=BUCKETS, registry=self.reg
                                  ).labels(*lv)
                  for name in (m.QUEUE_TIME, m.PREFILL_TIME, m.DECODE_TIME, m.TTFT)}

    def text(self) -> str:
        return generate_latest(self.reg).decode()


def series(*, waiting: float, running: float, kv: float, n: int = 10, preempt: int = 0,
           queue_s: float = 0.01, prefill_s: float = 0.05, decode_s: float = 1.0,
           ttft_s: float = 0.1, idle_tail: int = 2) -> list[m.Snapshot]:
    """n samples under a steady load, then `idle_tail` drained samples (all gauges 0)."""
    e = FakeEngineMetrics()
    out = [m.Snapshot.parse(e.text(), t=0.0)]
    for i in range(n):
        e.waiting.set(waiting)
        e.running.set(running)
        e.kv.set(kv)
        for _ in range(5):
            e.h[m.QUEUE_TIME].observe(queue_s)
            e.h[m.PREFILL_TIME].observe(prefill_s)
            e.h[m.DECODE_TIME].observe(decode_s)
            e.h[m.TTFT].observe(ttft_s)
        if i < preempt:
            e.preempt.inc()
        out.append(m.Snapshot.parse(e.text(), t=float(i + 1)))
    for j in range(idle_tail):
        e.waiting.set(0)
        e.running.set(0)
        e.kv.set(0)
        out.append(m.Snapshot.parse(e.text(), t=float(n + 1 + j)))
    return out

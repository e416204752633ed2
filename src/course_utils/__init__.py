"""vLLM Tuning Labs: the knowledge behind the course-book, in one package.

Facts are written once here (a knob's direction, a metric name, a default) and the
book pages, lab notebooks and quizzes read them. Pinned vLLM: 0.26.0.
"""

VLLM_VERSION = "0.26.0"
__all__ = ["VLLM_VERSION"]

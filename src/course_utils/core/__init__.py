"""The course's knowledge, pure: no subprocess, no GPU, no import of ``lab`` or ``quiz``.

knobs (the direction map), capacity, slo, metrics, diagnose (the decision tree), evalset,
records (every record and the one JSONL store), vllm_logs (every parser of vLLM
0.26.0 log text), validity (is a measured window valid?) and keep (the rules the course
teaches: objective, keep/revert with spread, the knee range, lab 01's verdict).
"""

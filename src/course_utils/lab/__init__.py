"""What runs processes: `vllm serve` (server), `vllm bench serve` (bench), measured windows,
sweep, tune, knee, lab 01 (offline), replay, plots, the grid comparison, the model folder,
preflight and the verbs of ``python -m course_utils`` (cli). Imports ``core``, never ``quiz``.
"""

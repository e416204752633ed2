"""What runs processes: ``vllm serve`` (server), ``vllm bench serve`` (bench), one measured
window (measure), the sweep and the loop (sweep, tune), the knee scan (knee), lab 01's
``LLM`` points (offline), replay of recorded runs, plots, the side-by-side with vLLM's own
sweep, the dummy model folder and preflight. Imports ``core``, never ``quiz``.
"""

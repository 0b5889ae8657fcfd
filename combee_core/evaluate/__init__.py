"""The built-in evaluate stage: held-out evaluation requests answered by the simulated agents (``processor``); what
an evaluator built from a score function answers is ``combee_core/promote/evaluation.py``, shared with outside
evaluators."""

"""The control stage: its processor (``processor``), the batch-size controller and what it models: delay, streaming
objective, rollouts, backlog, capacity and LLM-call concurrency."""

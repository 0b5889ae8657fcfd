"""The batch-size controller and what it models: delay, streaming objective, rollouts, backlog, capacity and LLM-call
concurrency."""

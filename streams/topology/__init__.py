"""The topology at run time: the stage runtime and the stages, the worker that runs them, dead letters, offsets,
the live views of state topics, health and metrics, the LLM set-up, topics, and the in-process pipeline runner."""

"""The reflect stage (the paper's Map): one reflector call per trace (``processor``); its prompt is
``combee_core/llm/reflector_prompt.py``."""

"""The LLM layer: the three roles over litellm (``roles``, ``config``, ``provider``), their prompts and the parsing of
their answers (``prompts``, ``parsing``), and the offline simulator (``simulator``, ``sim_calls``, ``honest``).

A name is imported from the module that defines it (``tests/unit/test_import_homes.py``). Importing a module of
this package does not import litellm but ``combee_core.llm.provider``; ``LLMRoles`` imports it when created (unless
it is given a ``responder`` or every role runs on the simulator).
"""

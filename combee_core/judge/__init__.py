"""The built-in LLM judge evaluator (issue 41 item 3): the user's agent model runs each held-out task with the
candidate playbook and a judge model judges the answer, both through litellm, with versioned prompts (``prompts``)
and every call recorded for replay (``calls``); ``score`` is the score function, ``settings`` its configuration.
``combee judge`` (``combee_client.judge``) runs it as an evaluator process."""

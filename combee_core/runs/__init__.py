"""A run's records read and written outside the pipeline: archive, audit, diff, replay, dead-letter queries, and
playbooks imported from outside (seed, ACE's text format)."""

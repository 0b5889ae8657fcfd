"""The simulated agents' task suite and honest mode's suite, registry and wordings."""

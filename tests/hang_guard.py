"""How long a test's child process may run before the test calls it hung."""

SUBPROCESS_HANG_S = 1800
"""Seconds: a guard against a hang, never a speed target (what a test's subprocess does is checked by its output).
At load 35-40 a clean-clone lane's `import litellm` child took over 120 s and mypy over 600 s; the whole suite on a
2-core CI machine takes ~15 minutes, so a real hang still ends well within CI's limit."""

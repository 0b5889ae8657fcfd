"""Promotion: which candidate version is served, decided on held-out scores; the live-trace guard and what an
improvement cost."""

"""The promote stage: which candidate version is served, decided on held-out scores (``promotion``, the processor
``processor`` with its memory and resume rules), the held-out task sets and what an improvement cost."""

"""The batch stage: its processor (``processor``), windows of reflections, the augmented shuffle, replay's recorded
batches, and the memory of batched trace ids."""

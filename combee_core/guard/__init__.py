"""The guard stage (promotion off): the live-trace rule, an always-valid sequential test of a served version against
its parent (``rule``), and the processor that rolls a version back when the rule says so (``processor``)."""

"""Processors: each stage's decisions, as pure code (no Kafka, no clock, no I/O).

A processor takes decoded input models (and, from its stage, the time and the state views it reads) and answers
with effects (``combee_core.processors.effects``): publish a model to a topic, dead-letter an input with a reason,
acknowledge inputs whose effects are out, count something. The stage in ``streams/topology/stages/`` is a thin
binding: the runtime decodes each record, the stage hands it to its processor with an opaque *token* (the record),
and performs the effects in order. ``combee_core.processors.testing.EffectLog`` drives a processor in unit tests,
without a broker.
"""

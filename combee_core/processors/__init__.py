"""What every stage's processor shares: its effects (``effects``: publish, dead-letter, acknowledge, count), how
long a stage sends a record the broker refused again (``resend``) and the unit-test driver (``testing.EffectLog``).
Each processor lives in its stage's package (``combee_core/<stage>/processor.py``, the package
``combee_core.topology.StageSpec.package`` names); the binding in ``streams/topology/stages/`` performs the effects
on Kafka.

A processor takes decoded input models (and, from its stage, the time and the state views it reads) and answers
with effects. The stage is a thin binding: the runtime decodes each record, the stage hands it to its processor
with an opaque *token* (the record), and performs the effects in order. ``EffectLog`` drives a processor in unit
tests, without a broker.
"""

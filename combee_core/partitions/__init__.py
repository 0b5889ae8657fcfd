"""What a stage's consumer-group member decides about its input partitions, pure: which it owns and in what status
(``ownership``). The stage runtime (``streams.topology.runtime``) binds it to the Kafka client."""

"""The fan-in: the aggregator's windows, the root reducer's bounded-fan-in scan, its deterministic merge, the reduction
to a new version and the playbook's size budget."""

"""A run's records, from outside the stages: export, replay and diff; playbook versions in and out; GEPA driving
a run as its candidate proposer."""

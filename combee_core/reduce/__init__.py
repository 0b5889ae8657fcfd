"""The reduce stage (the fan-in): the processor (``processor``, its logs ``reducer_state``), the bounded-fan-in scan,
its deterministic merge, the reduction to a new version and the playbook's size budget."""

"""A stage's live views of the logs it reads outside its group (``log_view``, ``numbered_log``, ``live_traces``) and
its watch over its backlog (``backlog``). A view depends on what it uses of its stage, :mod:`.host`'s protocols, and
on the stage's partition ownership (``combee_core.partitions.ownership``), not on ``streams.topology.runtime.Stage``:
a unit test hands it a stand-in."""

"""Combee Streams' Kafka side, by job: ``broker`` (the broker and its clients' settings), ``topology`` (the stage
runtime, the stages and the worker), the applications ``demo``, ``runs`` (export, replay, diff, playbook import and
export, GEPA) and ``local_model``, and ``cli`` (the ``combee`` command). ``testing`` is the tests' and benchmarks'
harness."""

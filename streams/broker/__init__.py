"""The broker: the embedded Tansu broker (binary lookup, child process), the wire probe, topic admin, the client
profile, the record of a running ``combee broker`` and the watchdog that notices a lost broker. Imports nothing else
of ``streams``."""

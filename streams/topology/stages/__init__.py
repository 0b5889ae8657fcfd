"""One module per stage of the topology. A stage is thin: decode -> combee_core -> encode -> send."""

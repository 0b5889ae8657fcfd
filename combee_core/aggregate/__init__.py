"""The aggregate stage: the subgroup windows of shuffled reflection copies (``windows``) and the processor that turns a
complete window into a partial update with one aggregator call (``processor``)."""

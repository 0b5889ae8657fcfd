"""Review mode on the broker: reading what reviewers decide on, writing their decisions, and the web page."""

"""What comes in: redaction of a trace's personal data and secrets at ingest."""

"""What agents are served: the served version, serving, scopes, review mode and a reviewer's context."""

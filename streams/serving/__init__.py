"""``combee serve``: the served playbook versions over HTTP and MCP (docs/serving.md)."""

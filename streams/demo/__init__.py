"""The demo (``combee demo``): a simulated agent fleet learning a playbook live, its follower and its plots."""

"""tailscope.plan."""

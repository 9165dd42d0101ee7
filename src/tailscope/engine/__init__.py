"""tailscope.engine."""

"""tailscope.serve."""

"""tailscope.gate."""

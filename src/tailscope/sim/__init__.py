"""tailscope.sim."""

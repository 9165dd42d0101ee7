"""tailscope.runner."""

"""tailscope.trace."""

"""tailscope.client."""

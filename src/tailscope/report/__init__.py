"""tailscope.report."""

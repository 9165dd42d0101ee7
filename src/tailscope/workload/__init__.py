"""tailscope.workload."""

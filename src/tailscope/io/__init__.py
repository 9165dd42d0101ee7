"""The IO edge: every file a user hands tailscope is read and validated here, then passed on as parsed objects."""

"""Front ends besides the command line that run on the public API: the ``tailscope ui`` dashboard."""

"""The Model Context Protocol front end (``tailscope mcp``): the public API as bounded, machine-readable tools."""

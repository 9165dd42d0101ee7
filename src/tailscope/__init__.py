"""tailscope: performance engineering for LLM and agent systems — measure, locate, plan, verify."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

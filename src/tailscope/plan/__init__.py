"""Capacity planning: KV/memory, request-time estimates, SLO-backed capacity search, cost, latency budgets."""

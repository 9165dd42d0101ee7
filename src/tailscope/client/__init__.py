"""Edges to servers: the Transport protocol, the OpenAI SSE client, the SSE parser and the /metrics scraper."""

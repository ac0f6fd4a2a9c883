"""Layer 2: worker bootstrap and the hosts (MCP pool, models, caches) it owns."""

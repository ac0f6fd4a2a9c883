"""The durable session run loop and the other workflows (config registry, schedule firings,
provider limiters). Deterministic code only."""

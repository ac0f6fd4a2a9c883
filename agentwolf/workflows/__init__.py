"""The durable session run loop and the other workflows (config registry, schedule firings,
provider quota workflows). Deterministic code only."""

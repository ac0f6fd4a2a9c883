"""Layer 4: the durable session run loop. Deterministic code only."""

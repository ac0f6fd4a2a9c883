"""Layer 3/5 edges: every piece of I/O a session does runs here, as a Temporal activity."""

"""Layer 2: worker bootstrap (the Temporal worker, its workflow sandbox) running the hosts of
agentwolf.hosts."""

"""The worker: its bootstrap (the Temporal worker with the session workflows and activities,
bootstrap.py) and its workflow sandbox (sandbox.py), running the hosts of agentwolf.hosts."""

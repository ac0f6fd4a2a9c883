"""What an operator runs beside the sessions: the embedded local stack (a Temporal dev server and a
worker, `wolf up`/`down`), the dev server's command and tuning, a namespace's one-time setup
(`wolf setup`), the payload store's retention (`wolf payloads gc`), worker deployments as `wolf deploy`
shows and switches them (deployments.py) and the replay gate of `wolf check-replay` (replay_check.py).

Not the SDK (nothing here starts or steers a session; the last two import the worker, which the SDK
may not) and not the CLI (tests and bench scripts start a dev server without loading the `wolf`
program): `client/` and `ops/` import nothing of each other."""

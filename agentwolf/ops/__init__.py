"""What an operator runs beside the sessions: the embedded local stack (a Temporal dev server and a
worker, `wolf up`/`down`), the dev server's command and tuning, a namespace's one-time setup
(`wolf setup`) and the payload store's retention (`wolf payloads gc`).

Not the SDK (nothing here starts or talks to a session) and not the CLI (tests and bench scripts
start a dev server without loading the `wolf` program): `client/` and `ops/` import nothing of each
other."""

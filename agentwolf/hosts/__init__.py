"""The hosts a worker runs, one per (config identity, tenant): the MCP pool, the extension registry,
models and caches. Below the activities, which look a host up and delegate to it."""

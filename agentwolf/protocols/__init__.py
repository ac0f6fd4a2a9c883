"""Protocol front ends (`wolf serve`, `wolf mcp`, `wolf acp`). Thin translations from external protocols onto
`WolfClient`, scoped by (config, tenant), holding no session state: any number of `wolf serve`
processes can serve any session, and killing one mid-stream loses nothing."""

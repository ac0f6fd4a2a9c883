"""RFC-0051 extension registry (skills, MCP, commands): built by the extensions issue."""

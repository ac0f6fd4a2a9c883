"""Extensions (RFC-0051): skills, MCP servers, slash commands, function tools, code mode and web,
found by the ExtensionRegistry by scope."""

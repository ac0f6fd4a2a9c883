"""An 'MCP server' that answers every line with garbage: malformed MCP responses."""

import sys

for _line in sys.stdin:
    sys.stdout.write("this is not json-rpc {{{\n")
    sys.stdout.flush()

"""An 'MCP server' that reads stdin and never answers: for initialize timeouts."""

import sys
import time

for _ in sys.stdin:
    time.sleep(0)
time.sleep(3600)

"""The Python API: submit a background task, print its answer as it streams, then its result.
Needs a worker: `wolf up` (the local stack), then `python examples/python_client.py [ADDRESS]`
(default localhost:7233)."""

from __future__ import annotations

import asyncio
import os
import sys
from importlib.resources import files

from agentwolf.client import WolfClient

CONFIG = str(files("agentwolf") / "examples" / "wolf.yaml")  # the bundled example `wolf submit` uses


async def main(address: str) -> None:
    wolf = await WolfClient.connect(address)
    session = await wolf.submit("What time is it in Tokyo?", "assistant", CONFIG)
    async for _offset, event in wolf.events(session):
        if event.kind == "tool_call_started":
            print(f"[{event.tool}]")
        elif event.kind == "text_delta":
            print(event.text, end="", flush=True)
    result = await wolf.result(session)
    print(f"\n{result.outcome}: {len(result.output or '')} characters")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "localhost:7233"))
    # temporalio's core threads can still call into Python while the interpreter finalizes, which
    # aborts a short client program now and then (temporalio/sdk-python#300): leave without it.
    sys.stdout.flush()
    os._exit(0)

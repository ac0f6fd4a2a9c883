"""`python -m agentwolf.worker [--address HOST:PORT] [--task-queue Q]`: run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time

from temporalio.client import Client

from agentwolf.client.wolf_client import connect
from agentwolf.worker.main import TASK_QUEUE, create_worker, run_worker


async def serve(address: str | None, namespace: str | None, task_queue: str, connect_for: float = 120.0) -> None:
    client = await _connect_patiently(address, namespace, connect_for)
    worker, hosts = create_worker(client, task_queue=task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger(__name__).info("worker ready on task queue %s", task_queue)
    await run_worker(worker, hosts, stop)


async def _connect_patiently(address: str | None, namespace: str | None, give_up_after: float) -> Client:
    """A worker may start while the server is (re)starting: retry with backoff before giving up."""
    log = logging.getLogger(__name__)
    deadline = time.monotonic() + give_up_after
    delay = 0.5
    while True:
        try:
            return await connect(address, namespace)
        except RuntimeError as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("cannot reach Temporal yet (%s); retrying in %.1fs", str(exc).splitlines()[0][:120], delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address")
    parser.add_argument("--namespace")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.address, args.namespace, args.task_queue))


if __name__ == "__main__":
    main()

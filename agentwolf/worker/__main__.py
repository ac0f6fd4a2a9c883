"""`python -m agentwolf.worker [--address HOST:PORT] [--task-queue Q]`: run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from agentwolf.client.wolf_client import connect
from agentwolf.worker.main import TASK_QUEUE, create_worker, run_worker


async def serve(address: str | None, namespace: str | None, task_queue: str) -> None:
    client = await connect(address, namespace)
    worker, hosts = create_worker(client, task_queue=task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger(__name__).info("worker ready on task queue %s", task_queue)
    await run_worker(worker, hosts, stop)


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

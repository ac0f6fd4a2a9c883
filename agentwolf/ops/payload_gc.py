"""Retention for the filesystem payload store (`wolf payloads gc`): remove payloads that are older
than an age and that no running workflow references.

References: for every stored payload, temporalio's `ExternalStorage` leaves a JSON reference payload
in history naming the driver and its claim (`{"driverName":"wolf-fs","claimData":{"sha256":"<digest>"}}`).
Rather than decode those, every 64-hex string in the serialized history of every running workflow
counts as a reference, and so does every one in the stored payloads those name, transitively (a
continue-as-new input stored by reference names a session's archived transcript parts): a hex
string that only looks like a digest keeps a file longer, which is safe. Every namespace of the
server is searched, since tenants with namespaces of their own share the one store.

Age: a payload stored moments ago may belong to a workflow start, an activity result or an update
that history (or visibility) does not show yet, so only files older than the age go. Storing a
payload again refreshes its file's time, and the age is measured after the references are read.
Finished workflows keep nothing: the results and histories of sessions closed longer ago than the
age can lose their payloads.
"""

from __future__ import annotations

import asyncio
import re
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import BaseModel
from temporalio.api.enums.v1 import NamespaceState
from temporalio.api.workflowservice.v1 import ListNamespacesRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.payloads import DIGEST, TEMP

REFERENCE = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
"""A digest in serialized history: a claim is a JSON string, so no hex character borders it."""
SHARD = re.compile(r"[0-9a-f]{2}")


class GcReport(BaseModel):
    """What one collection removed (or, on a dry run, would remove) and kept, in files and bytes."""

    store: str
    older_than_seconds: int
    dry_run: bool
    running_workflows: int
    removed: list[str] = []
    removed_bytes: int = 0
    kept_referenced: int = 0
    kept_referenced_bytes: int = 0
    kept_young: int = 0
    kept_young_bytes: int = 0


async def _namespaces(client: Client) -> AsyncIterator[str]:
    token = b""
    while True:
        page = await client.workflow_service.list_namespaces(
            ListNamespacesRequest(page_size=100, next_page_token=token)
        )
        for described in page.namespaces:
            if described.namespace_info.state != NamespaceState.NAMESPACE_STATE_DELETED:
                yield described.namespace_info.name
        token = page.next_page_token
        if not token:
            return


async def referenced_digests(client: Client) -> tuple[set[str], int]:
    """The digests the histories of running workflows mention, in every namespace; and how many
    workflows that was."""
    found: set[str] = set()
    running = 0
    async for namespace in _namespaces(client):
        scoped = Client(client.service_client, namespace=namespace)  # raw history only: no converter
        async for execution in scoped.list_workflows("ExecutionStatus = 'Running'"):
            running += 1
            handle = scoped.get_workflow_handle(execution.id, run_id=execution.run_id)
            try:
                async for event in handle.fetch_history_events():
                    found.update(m.decode() for m in REFERENCE.findall(event.SerializeToString()))
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: deleted since it was listed
                    raise
    return found, running


def followed(root: Path, referenced: set[str]) -> set[str]:
    """`referenced` and every digest the stored payloads it names mention, transitively: a payload
    stored by reference can name others (a session's continue-as-new input past 256 KiB carries the
    claims of its transcript's archived parts, workflows/archive.py), which history never shows."""
    found, todo = set(referenced), list(referenced)
    while todo:
        digest = todo.pop()
        try:
            data = (root / digest[:2] / digest).read_bytes()
        except OSError:  # not in this store (another store's claim, or a hex string that only looks like one)
            continue
        for match in REFERENCE.findall(data):
            if (named := match.decode()) not in found:
                found.add(named)
                todo.append(named)
    return found


def _sweep(root: Path, referenced: set[str], older_than: int, dry_run: bool, running: int) -> GcReport:
    """Payload files (and temp files left by dead writers) past the age and unreferenced go; any
    other file in the folder is not the store's and is left alone."""
    report = GcReport(
        store=str(root), older_than_seconds=older_than, dry_run=dry_run, running_workflows=running
    )
    cutoff = time.time() - older_than
    shards = (
        sorted(d for d in root.iterdir() if SHARD.fullmatch(d.name) and d.is_dir()) if root.is_dir() else []
    )
    for shard in shards:
        for file in sorted(shard.iterdir()):
            name = file.name
            if not ((DIGEST.fullmatch(name) and name.startswith(shard.name)) or TEMP.fullmatch(name)):
                continue
            try:
                info = file.lstat()
            except FileNotFoundError:  # a temp file its writer just renamed, or another gc
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if name in referenced:
                report.kept_referenced += 1
                report.kept_referenced_bytes += info.st_size
            elif info.st_mtime > cutoff:
                report.kept_young += 1
                report.kept_young_bytes += info.st_size
            else:
                if not dry_run:
                    file.unlink(missing_ok=True)
                report.removed.append(name)
                report.removed_bytes += info.st_size
    return report


async def collect_garbage(client: Client, root: Path, older_than: int, *, dry_run: bool = False) -> GcReport:
    """Remove the store's payloads older than `older_than` seconds that no running workflow
    references (`dry_run`: only report them). References are read first, ages after."""
    referenced, running = await referenced_digests(client)
    referenced = await asyncio.to_thread(followed, root, referenced)
    return await asyncio.to_thread(_sweep, root, referenced, older_than, dry_run, running)

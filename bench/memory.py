"""Long-term memory: recall on LoCoMo and search latency at scale, on SQLite and PostgreSQL.

Recall. Each dialogue turn of each LoCoMo conversation is ingested as one record (`about` = the
speaker, the text with the shared photo's caption) in that conversation's own namespace; for every
question of categories 1-4 (multi-hop, temporal, open-domain, single-hop) the search returns 10
records, and recall@10 is the share of the question's evidence turns among them (averaged over
questions). AgentWolf's search (stemmed FTS5 / English tsvector, stop words dropped, a boost for a
record whose `about` the question names) is compared with plain BM25 over the same records: SQLite
FTS5 with its default tokenizer, every word of the question OR-ed. No model, no embeddings.

Scale. OWNERS namespaces of ROWS records each (sentences drawn from LoCoMo), then 500 searches by
LoCoMo questions on random owners: p50/p95 per store (goals: p95 <= 50 ms SQLite, <= 100 ms
PostgreSQL).

Run:  python bench/memory.py [--data DIR] [--owners 100] [--rows 10000] [--postgres URL | --no-postgres]
      [--no-sqlite]
DIR defaults to ../shared/data/locomo/ (any folder of LoCoMo conversation files: one conversation
per file, or locomo10.json's list). Without --postgres, a private cluster is started when Debian's
PostgreSQL is installed (tests/support/postgres.py). Files go to a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # agentwolf and tests/ from this checkout

from agentwolf.memory import ranking  # noqa: E402
from agentwolf.memory.namespaces import Namespace  # noqa: E402
from agentwolf.memory.store import MemoryStore, NewRow, Plan  # noqa: E402
from agentwolf.memory.stores import open_store  # noqa: E402
from agentwolf.workflows.memory_tools import MemoryView, Provenance  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo"
MAIN = MemoryView()
K = 10


def conversations(folder: Path) -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(name, conversation, qa) of every LoCoMo conversation in the folder's JSON files."""
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for n, item in enumerate(data if isinstance(data, list) else [data]):
            conversation = item.get("conversation", item)
            yield f"{path.stem}-{n}", conversation, item["qa"]


def turns(conversation: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(dia_id, speaker, text) of every turn; a shared photo's caption joins its turn's text."""
    for key, value in conversation.items():
        if re.fullmatch(r"session_\d+", key):
            for turn in value:
                caption = f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
                yield turn["dia_id"], turn["speaker"], turn["text"] + caption


def ingest(store: MemoryStore, ns: Namespace, rows: list[NewRow], key: str) -> list[str]:
    """Rows added in one write: their ids."""
    return store.write(ns, MAIN, key, key, Provenance(source="imported"), lambda _r: Plan(rows, "ok")).ids


def search(store: MemoryStore, ns: Namespace, query: str) -> tuple[list[str], float]:
    started = time.perf_counter()
    hits = ranking.rank(store.search(MAIN, [ns], ranking.terms(query), ranking.POOL), query, K)
    return [h.id for h in hits], (time.perf_counter() - started) * 1000


class PlainBm25:
    """The baseline: SQLite FTS5 with its default tokenizer (no stemming), every word OR-ed, bm25()."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(owner UNINDEXED, dia, body)")

    def add(self, owner: str, dia: str, body: str) -> None:
        self.db.execute("INSERT INTO t VALUES (?, ?, ?)", (owner, dia, body))

    def search(self, owner: str, query: str) -> list[str]:
        words = " OR ".join(f'"{w}"' for w in dict.fromkeys(re.findall(r"[^\W_]+", query.lower())))
        sql = "SELECT dia FROM t WHERE t MATCH ? AND owner = ? ORDER BY bm25(t) LIMIT ?"
        return [r[0] for r in self.db.execute(sql, (f"body : ({words})", owner, K))]


def recall(store: MemoryStore, folder: Path, baseline: PlainBm25 | None) -> dict[str, Any]:
    ours: dict[int, list[float]] = {}
    plain: dict[int, list[float]] = {}
    latencies: list[float] = []
    for name, conversation, qa in conversations(folder):
        ns = Namespace("bench", f"locomo-{name}", "a")
        found = list(turns(conversation))
        ids = ingest(
            store, ns, [NewRow("user", text, speaker) for _, speaker, text in found], f"locomo/{name}"
        )
        dia_of = dict(zip(ids, (dia for dia, _, _ in found), strict=True))
        if baseline is not None:
            for dia, _, text in found:
                baseline.add(name, dia, text)
        for q in qa:
            if q.get("category") not in (1, 2, 3, 4) or not q.get("evidence"):
                continue
            evidence = set(q["evidence"])
            hits, ms = search(store, ns, q["question"])
            latencies.append(ms)
            ours.setdefault(q["category"], []).append(
                len(evidence & {dia_of[h] for h in hits}) / len(evidence)
            )
            if baseline is not None:
                got = set(baseline.search(name, q["question"]))
                plain.setdefault(q["category"], []).append(len(evidence & got) / len(evidence))
    return {"ours": ours, "plain": plain, "latencies": latencies}


def scale(store: MemoryStore, folder: Path, owners: int, rows: int, seed: int = 41) -> list[float]:
    rng = random.Random(seed)
    sentences = [(s, t) for _, c, _ in conversations(folder) for _, s, t in turns(c)]
    questions = [q["question"] for _, _, qa in conversations(folder) for q in qa]
    for n in range(owners):
        ns = Namespace("scale", f"user{n}", "a")
        picked = [rng.choice(sentences) for _ in range(rows)]
        ingest(
            store,
            ns,
            [NewRow(rng.choice(["user", "project", "feedback"]), t, s) for s, t in picked],
            f"scale/{n}",
        )
    latencies = []
    for _ in range(500):
        _, ms = search(store, Namespace("scale", f"user{rng.randrange(owners)}", "a"), rng.choice(questions))
        latencies.append(ms)
    return latencies


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]


def report(label: str, result: dict[str, Any]) -> None:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    for who in ("ours", "plain"):
        by = result[who]
        if not by:
            continue
        every = [v for values in by.values() for v in values]
        cats = "  ".join(f"cat{c} {mean(v):.3f} (n={len(v)})" for c, v in sorted(by.items()))
        name = "agentwolf" if who == "ours" else "plain BM25"
        print(f"{label} {name:<10} recall@10 {mean(every):.3f}  {cats}")
    lat = result["latencies"]
    p50, p95 = percentile(lat, 50), percentile(lat, 95)
    print(f"{label} search latency p50 {p50:.2f} ms  p95 {p95:.2f} ms (n={len(lat)})")


@contextlib.contextmanager
def postgres(url: str | None, wanted: bool) -> Iterator[str | None]:
    if url or not wanted:
        yield url
        return
    from tests.support import postgres as cluster

    reason = cluster.available()
    if reason is not None:
        print(f"PostgreSQL skipped: {reason}")
        yield None
        return
    with cluster.cluster() as started:
        yield started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--postgres", metavar="URL")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, postgres(args.postgres, not args.no_postgres) as pg:
        stores = [] if args.no_sqlite else [("sqlite", f"sqlite:///{tmp}/memory.db")]
        stores += [("postgres", pg)] if pg else []
        for label, url in stores:
            store = open_store(url)
            report(f"[{label}]", recall(store, args.data, PlainBm25() if label == "sqlite" else None))
            started = time.perf_counter()
            lat = scale(store, args.data, args.owners, args.rows)
            took = time.perf_counter() - started
            print(
                f"[{label}] {args.owners} owners x {args.rows} rows (loaded and searched in {took:.0f} s): "
                f"search p50 {percentile(lat, 50):.2f} ms  p95 {percentile(lat, 95):.2f} ms (n={len(lat)})"
            )
            store.close()


if __name__ == "__main__":
    main()

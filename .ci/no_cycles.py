"""No import cycle anywhere in a package: `python .ci/no_cycles.py [agentwolf]`.

The import-linter contracts forbid upward imports between packages and circles among the modules of
protocols/ and cli/; this checks every module of the whole tree, imports made inside functions
included (grimp, which import-linter is built on, reads them all). Exits 1 naming each cycle."""

from __future__ import annotations

import sys

import grimp


def cycles(package: str) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    graph = grimp.build_graph(package, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.find_modules_directly_imported_by(target)))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def main() -> None:
    package = sys.argv[1] if len(sys.argv) > 1 else "agentwolf"
    found = cycles(package)
    for group in found:
        print(f"import cycle: {' <-> '.join(group)}")
    print(f"{package}: {len(found)} import cycle(s)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

"""A cluster namespace's one-time setup: AgentWolf's search attributes (`wolf setup`)."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client

from agentwolf.workflows.types import SEARCH_ATTRIBUTES


async def register_search_attributes(client: Client) -> list[str]:
    """Add the session search attributes the namespace lacks (Keyword, WolfActive a Datetime); returns
    their names.

    An attribute that exists with another type is an error: sessions could not be listed by it."""
    namespace = client.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    wanted = {key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in SEARCH_ATTRIBUTES}
    wrong = [
        f"{name} (wanted {IndexedValueType.Name(kind).removeprefix('INDEXED_VALUE_TYPE_').title()})"
        for name, kind in wanted.items()
        if name in listed.custom_attributes and listed.custom_attributes[name] != kind
    ]
    if wrong:
        raise ValueError(f"namespace {namespace!r} has {', '.join(wrong)} of another type: remove them first")
    missing = {name: kind for name, kind in wanted.items() if name not in listed.custom_attributes}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    return list(missing)

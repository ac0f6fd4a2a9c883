"""A cluster namespace's one-time setup: AgentWolf's search attributes (`wolf setup`)."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client

from agentwolf.workflows.types import SEARCH_ATTRIBUTES


async def register_search_attributes(client: Client) -> list[str]:
    """Add the session search attributes the namespace lacks (all Keyword); returns their names.

    An attribute that exists with another type is an error: sessions could not be listed by it."""
    namespace = client.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    wrong = [
        key.name
        for key in SEARCH_ATTRIBUTES
        if key.name in listed.custom_attributes and listed.custom_attributes[key.name] != keyword
    ]
    if wrong:
        raise ValueError(
            f"namespace {namespace!r} has {', '.join(wrong)} with a type other than Keyword: "
            "remove them first"
        )
    missing = [key.name for key in SEARCH_ATTRIBUTES if key.name not in listed.custom_attributes]
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=dict.fromkeys(missing, keyword))
        )
    return missing

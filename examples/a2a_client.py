"""An A2A client (a2a-sdk) against `wolf serve`'s `/a2a/{agent}`: send a message, assemble the answer
as its artifact streams in, then print it and the task's last state. With the bundled example:

    pip install 'agentwolf[serve,a2a]'
    WOLF_API_KEYS="sk-me=me" wolf serve &
    python examples/a2a_client.py [AGENT_URL] [API_KEY]   # default http://127.0.0.1:8088/a2a/assistant sk-me
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState


async def main(url: str = "http://127.0.0.1:8088/a2a/assistant", api_key: str = "sk-me") -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=None) as http:
        client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(url)
        ask = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="What time is it in Tokyo?")]
        )
        answer, state = "", TaskState.TASK_STATE_UNSPECIFIED
        async for event in client.send_message(SendMessageRequest(message=ask)):
            if event.HasField("artifact_update"):
                update = event.artifact_update
                chunk = "".join(part.text for part in update.artifact.parts)
                answer = answer + chunk if update.append else chunk  # `append: false` replaces a retried text
            elif event.HasField("status_update"):
                state = event.status_update.status.state
        await client.close()
    print(answer)
    print(TaskState.Name(state))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))

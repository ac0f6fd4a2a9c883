"""The official OpenAI SDK against `wolf serve`: list the agents, stream a chat completion, then two
Responses of one durable session (`previous_response_id`). With the bundled example:

    pip install openai 'agentwolf[serve]'
    WOLF_API_KEYS="sk-me=me" wolf serve &
    python examples/openai_client.py [BASE_URL] [API_KEY]   # default http://127.0.0.1:8088/v1 sk-me
"""

from __future__ import annotations

import sys

from openai import OpenAI


def main(base_url: str = "http://127.0.0.1:8088/v1", api_key: str = "sk-me") -> None:
    oa = OpenAI(base_url=base_url, api_key=api_key)
    print("agents:", [model.id for model in oa.models.list()])

    question = [{"role": "user", "content": "What time is it in Tokyo?"}]
    stream = oa.chat.completions.create(model="assistant", messages=question, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()

    first = oa.responses.create(model="assistant", input="What time is it in Sydney?")
    more = oa.responses.create(model="assistant", input="And in London?", previous_response_id=first.id)
    print(first.output_text.splitlines()[0])
    print(more.output_text.splitlines()[0])


if __name__ == "__main__":
    main(*sys.argv[1:3])

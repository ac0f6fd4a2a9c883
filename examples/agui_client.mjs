// An AG-UI client (@ag-ui/client's HttpAgent, what CopilotKit builds on) against `wolf serve`'s
// /agui/{agent}: one run on a thread (a durable session), its text printed as it streams. With the
// bundled example:
//
//   npm install @ag-ui/client; pip install 'agentwolf[serve]'
//   WOLF_API_KEYS="sk-me=me" wolf serve &
//   node examples/agui_client.mjs [AGENT_URL] [API_KEY]   # default http://127.0.0.1:8088/agui/assistant sk-me
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const [url = "http://127.0.0.1:8088/agui/assistant", key = "sk-me"] = process.argv.slice(2);
const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${key}` }, threadId: randomUUID() });
agent.messages = [{ id: randomUUID(), role: "user", content: "What time is it in Tokyo?" }];
await agent.runAgent(
  {},
  {
    onToolCallStartEvent: ({ event }) => console.log(`[${event.toolCallName}]`),
    onTextMessageContentEvent: ({ event }) => process.stdout.write(event.delta),
  },
);
console.log(`\nthread ${agent.threadId}`);

// Drives AgentWolf's AG-UI endpoint with the real @ag-ui/client HttpAgent and prints what it sees as
// JSON Lines: every event ({"event": ...}), each run's end ({"run": n, "interrupts": [...]}), a run's
// failure ({"failed": message}), and last {"messages": agent.messages}.
//
//   node tests/agui/run.mjs URL THREAD_ID PROMPT [--key KEY] [--answer approve|deny|none]
//
// With --answer approve (or deny), a run that ends with interrupts is followed by a run that resumes
// them all with that answer, until a run ends without any.
import { randomUUID } from "node:crypto";
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, threadId, prompt, ...rest] = process.argv.slice(2);
const option = (name, fallback) => {
  const at = rest.indexOf(name);
  return at >= 0 ? rest[at + 1] : fallback;
};
const key = option("--key", undefined);
const answer = option("--answer", "none");
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");

const agent = new HttpAgent({ url, threadId, headers: key ? { Authorization: `Bearer ${key}` } : {} });
agent.addMessage({ id: randomUUID(), role: "user", content: prompt });
const subscriber = { onEvent: ({ event }) => print({ event }) };

let runs = 0;
let resume;
try {
  for (;;) {
    runs += 1;
    await agent.runAgent(resume ? { resume } : {}, subscriber);
    print({ run: runs, interrupts: agent.pendingInterrupts });
    if (!agent.pendingInterrupts.length || answer === "none") break;
    const responses = Object.fromEntries(
      agent.pendingInterrupts.map((i) => [i.id, { status: "resolved", payload: { approved: answer === "approve" } }]),
    );
    resume = buildResumeArray(agent.pendingInterrupts, responses);
  }
} catch (error) {
  print({ failed: String(error?.message ?? error) });
}
print({ messages: agent.messages });

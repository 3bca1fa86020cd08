// An agent loop with Mnemo as its memory: post every turn, ask for the context
// before each model call, run the tool the model asks for, post its result.
//
//   MNEMO_URL=http://127.0.0.1:8000 OPENAI_BASE_URL=https://api.openai.com/v1 \
//   OPENAI_API_KEY=sk-… node dist/agent.js "Find me a flight to Lisbon."
//
// Any OpenAI-compatible server works; CI runs this against a scripted local one.

import { randomUUID } from "node:crypto";

import { MnemoClient, type Message } from "mnemo-client";

const MODEL = process.env.OPENAI_MODEL ?? "gpt-4o-mini";
const TOOLS = [
  {
    type: "function",
    function: {
      name: "search_flights",
      description: "Flights to a city on a day.",
      parameters: {
        type: "object",
        properties: { to: { type: "string" }, day: { type: "string" } },
        required: ["to", "day"],
      },
    },
  },
];

interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
interface AssistantMessage {
  role: "assistant";
  content: string | null;
  tool_calls?: ToolCall[];
}

/** The tool: a stand-in for a real flight search. */
function searchFlights(args: { to: string; day: string }) {
  return { flights: [{ number: "TP1351", to: args.to, day: args.day, price_eur: 89 }] };
}

async function chat(messages: unknown[]): Promise<AssistantMessage> {
  const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${process.env.OPENAI_API_KEY ?? ""}`,
    },
    body: JSON.stringify({ model: MODEL, messages, tools: TOOLS }),
  });
  if (!response.ok) throw new Error(`model call failed: ${response.status} ${await response.text()}`);
  const body = (await response.json()) as { choices: { message: AssistantMessage }[] };
  const message = body.choices[0]?.message;
  if (!message) throw new Error("the model returned no choice");
  return message;
}

export async function run(task: string, sessionId: string, userId: string, maxSteps = 5): Promise<string> {
  const mnemo = new MnemoClient({
    baseUrl: process.env.MNEMO_URL ?? "http://127.0.0.1:8000",
    ...(process.env.MNEMO_API_KEY ? { apiKey: process.env.MNEMO_API_KEY } : {}),
  });
  await mnemo.postTurns(sessionId, userId, [{ role: "user", content: task }]);
  for (let step = 0; step < maxSteps; step++) {
    // The context replaces the history: task state, memories, recent turns.
    const context = await mnemo.getContext(sessionId, { maxTokens: 2000 });
    const message = await chat(context.messages);
    await mnemo.postTurns(sessionId, userId, [message as Message]); // as the API returned it
    if (!message.tool_calls?.length) return message.content ?? "";
    const results: Message[] = message.tool_calls.map((call) => ({
      role: "tool",
      tool_call_id: call.id,
      content: JSON.stringify(searchFlights(JSON.parse(call.function.arguments))),
    }));
    await mnemo.postTurns(sessionId, userId, results);
  }
  throw new Error(`no answer after ${maxSteps} steps`);
}

const task = process.argv[2] ?? "Find me a flight to Lisbon on Friday.";
const session = process.env.SESSION_ID ?? `example-${randomUUID().slice(0, 8)}`;
console.log(await run(task, session, process.env.USER_ID ?? "example-user"));

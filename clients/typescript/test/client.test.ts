// The TypeScript client against a real `mnemo serve` at MNEMO_URL (started by
// tests/clients/test_typescript_client.py), plus its pure retry decision.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";

import { MnemoClient, MnemoError, retryDelayMs, withIds } from "../src/index.js";

const baseUrl = process.env.MNEMO_URL ?? "http://127.0.0.1:8000";
const apiKey = process.env.MNEMO_API_KEY; // unset: a server without keys (loopback)
const fresh = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

describe("retryDelayMs", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  const answer = (status: number, retryAfter?: string) =>
    new Response(null, { status, headers: retryAfter ? { "retry-after": retryAfter } : {} });
  const table: [number, Response | null, boolean, number | null][] = [
    [1, answer(503, "2"), true, 2000],
    [1, answer(503, "3600"), true, 30_000],
    [1, answer(503, new Date(now + 5000).toUTCString()), true, 5000],
    [3, answer(502), true, 2000],
    [4, answer(503, "1"), true, null],
    [1, answer(500), true, null],
    [1, answer(422), true, null],
    [1, null, true, 500],
    [1, null, false, null],
  ];
  for (const [attempt, response, idempotent, expected] of table) {
    test(`attempt ${attempt}, ${response?.status ?? "no answer"}, idempotent ${idempotent}`, () => {
      assert.equal(retryDelayMs(attempt, 3, response, idempotent, now), expected);
    });
  }
});

describe("MnemoClient against mnemo serve", () => {
  const mnemo = apiKey ? new MnemoClient({ baseUrl, apiKey }) : new MnemoClient({ baseUrl });

  test("posts turns, reads the context, pages the archive", async () => {
    const session = fresh("s");
    const messages = withIds([
      { role: "user", content: "Book the cheapest flight to Lisbon." },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "search", arguments: '{"to": "LIS"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: '{"flights": 3}' },
    ]);
    const out = await mnemo.postTurns(session, "u-ts", messages);
    assert.deepEqual(out.turns.map((t) => t.seq), [1, 2, 3]);
    assert.ok(out.turns.every((t) => t.id.startsWith("c-")));

    const again = await mnemo.postTurns(session, "u-ts", messages);
    assert.ok(again.turns.every((t) => t.duplicate), "same ids: stored once");

    const context = await mnemo.getContext(session, { maxTokens: 1000 });
    assert.deepEqual(context.messages.slice(-3).map((m) => m.role), ["user", "assistant", "tool"]);
    const page = await mnemo.listTurns(session, { afterSeq: 1, limit: 1 });
    assert.deepEqual(page.turns.map((t) => t.seq), [2]);
    assert.equal((await mnemo.getSession(session)).turn_count, 3);
  });

  test("pops the newest turn; its id can be posted again", async () => {
    const session = fresh("s");
    const messages = withIds([
      { role: "user", content: "Two tickets to Porto." },
      { role: "user", content: "No, make it three." },
    ]);
    await mnemo.postTurns(session, "u-ts", messages);
    const popped = await mnemo.popTurn(session);
    assert.equal(popped.turn.id, messages[1]?.id);
    assert.equal(popped.turn.seq, 2);
    assert.equal(popped.turn_count, 1);
    const again = await mnemo.postTurns(session, "u-ts", messages.slice(1));
    assert.deepEqual(again.turns.map((t) => [t.seq, t.duplicate]), [[2, false]]);
    await mnemo.popTurn(session);
    await mnemo.popTurn(session);
    await assert.rejects(mnemo.popTurn(session), (error: unknown) => {
      assert.ok(error instanceof MnemoError);
      assert.equal(error.status, 404);
      assert.equal(error.problem.type, "https://mnemo.dev/problems/no-turns");
      return true;
    });
  });

  test("remembers, searches and forgets a memory", async () => {
    const user = fresh("u");
    const memory = await mnemo.createMemory(user, "Prefers aisle seats.", { kind: "preference" });
    const found = await mnemo.listMemories(user, { query: "aisle seat" });
    assert.deepEqual(found.memories.map((m) => m.id), [memory.id]);
    await mnemo.deleteMemory(user, memory.id);
    assert.deepEqual((await mnemo.listMemories(user)).memories, []);
  });

  test("an invalid message is a MnemoError naming the field", async () => {
    await assert.rejects(
      mnemo.postTurns(fresh("s"), "u-ts", [{ role: "tool", content: "x" }]),
      (error: unknown) => {
        assert.ok(error instanceof MnemoError);
        assert.equal(error.status, 422);
        assert.deepEqual(error.problem.errors?.map((e) => e.field), ["body.messages.0.tool_call_id"]);
        return true;
      },
    );
  });

  test("retries 503 with Retry-After, sending the same ids each time", async () => {
    const bodies: string[] = [];
    const flaky: typeof fetch = async (input, init) => {
      bodies.push(String(init?.body));
      if (bodies.length <= 2) return new Response("{}", { status: 503, headers: { "retry-after": "0" } });
      return fetch(input, init);
    };
    const client = new MnemoClient(apiKey ? { baseUrl, apiKey, fetch: flaky } : { baseUrl, fetch: flaky });
    const out = await client.postTurns(fresh("s"), "u-ts", [{ role: "user", content: "hi" }]);
    assert.equal(bodies.length, 3);
    assert.equal(new Set(bodies).size, 1);
    assert.equal(out.turns[0]?.duplicate, false);
  });

  test("an unknown session is a 404 MnemoError", async () => {
    await assert.rejects(mnemo.getState(fresh("s")), (error: unknown) => {
      assert.ok(error instanceof MnemoError);
      assert.equal(error.status, 404);
      return true;
    });
  });
});

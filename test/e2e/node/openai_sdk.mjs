// The OpenAI Node SDK against a running uvlm: node openai_sdk.mjs BASE_URL
// Streams a chat completion and asks for a completion with n=2; prints what it got as one JSON
// line for test_serving_node.py to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });

const stream = await client.chat.completions.create({
  model: "kjv-tiny",
  messages: [{ role: "user", content: "And God said" }],
  max_tokens: 8,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
const chat = { chunks: 0, text: "", finish: null, usage: null, ids: new Set() };
for await (const chunk of stream) {
  chat.chunks++;
  chat.ids.add(chunk.id);
  if (chunk.usage) chat.usage = chunk.usage;
  for (const c of chunk.choices) {
    chat.text += c.delta?.content ?? "";
    if (c.finish_reason) chat.finish = c.finish_reason;
  }
}

const completion = await client.completions.create({
  model: "kjv-tiny",
  prompt: "And God said",
  max_tokens: 6,
  n: 2,
  seed: 7,
  temperature: 1.0,
});

console.log(JSON.stringify({
  chat: { ...chat, ids: chat.ids.size },
  completion: {
    object: completion.object,
    choices: completion.choices.map((c) => ({ index: c.index, text: c.text, finish: c.finish_reason })),
    usage: completion.usage,
  },
}));

// The Anthropic TypeScript SDK against a running uvlm: node anthropic_sdk.mjs BASE_URL API_KEY
// messages.create without and with stream, messages.countTokens, and a bad request; prints what
// it got as one JSON line for test_serving_node.py to check.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.argv[2], apiKey: process.argv[3], maxRetries: 0, timeout: 60000 });
const request = {
  model: "kjv-tiny",
  max_tokens: 8,
  temperature: 0,
  system: "Answer in the words of the King James Bible.",
  messages: [{ role: "user", content: [{ type: "text", text: "And God said" }] }],
};

const whole = await client.messages.create(request);

const stream = client.messages.stream(request);
const streamed = { types: [], text: "" };
for await (const event of stream) {
  streamed.types.push(event.type);
  if (event.type === "content_block_delta" && event.delta.type === "text_delta") streamed.text += event.delta.text;
}
const final = await stream.finalMessage();

const counted = await client.messages.countTokens({ model: request.model, system: request.system,
                                                    messages: request.messages });

let refused = null;
try {
  await client.messages.create({ ...request, messages: [{ role: "user", content: [{ type: "image",
    source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] });
} catch (e) {
  refused = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message };
}

let unauthorized = null;
try {
  await new Anthropic({ baseURL: process.argv[2], apiKey: "wrong", maxRetries: 0 }).messages.create(request);
} catch (e) {
  unauthorized = { status: e.status, type: e.error?.error?.type, name: e.constructor.name };
}

console.log(JSON.stringify({
  whole: { id: whole.id, type: whole.type, role: whole.role, model: whole.model, content: whole.content,
           stop_reason: whole.stop_reason, usage: whole.usage },
  streamed: { ...streamed, final: { text: final.content[0].text, stop_reason: final.stop_reason,
                                    usage: final.usage } },
  counted,
  refused,
  unauthorized,
}));

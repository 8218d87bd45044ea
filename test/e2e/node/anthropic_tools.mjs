// The Anthropic TypeScript SDK with tools against a running uvlm: node anthropic_tools.mjs BASE_URL
// messages.create with tool_choice "any", whole and through the SDK's stream helper (which
// assembles input_json_delta into the tool_use block's input), then the call and its result sent
// back as tool_use / tool_result blocks; prints what it got as one JSON line for
// test_serving_node.py to check.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });
const tools = [{
  name: "get_weather",
  description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] },
}];
const request = {
  model: "qwen",
  max_tokens: 200,
  temperature: 0,
  tools,
  tool_choice: { type: "any", disable_parallel_tool_use: true },
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
};

const whole = await client.messages.create(request);

const stream = client.messages.stream(request);
const types = [];
const partial = [];
for await (const event of stream) {
  types.push(event.type);
  if (event.type === "content_block_delta" && event.delta.type === "input_json_delta") partial.push(event.delta.partial_json);
}
const final = await stream.finalMessage();

const use = whole.content.find((b) => b.type === "tool_use");
const next = await client.messages.create({
  ...request,
  max_tokens: 4,
  tool_choice: { type: "none" },
  messages: [
    ...request.messages,
    { role: "assistant", content: [use] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: JSON.stringify({ temp: 21 }) }] },
  ],
});

console.log(JSON.stringify({
  whole: { stop_reason: whole.stop_reason, content: whole.content },
  streamed: { types, partial, stop_reason: final.stop_reason, content: final.content },
  next: { types: next.content.map((b) => b.type), stop_reason: next.stop_reason },
}));

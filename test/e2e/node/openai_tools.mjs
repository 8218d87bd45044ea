// The OpenAI Node SDK's tool calls against a running uvlm: node openai_tools.mjs BASE_URL
// A chat completion with tools and tool_choice "required", whole and streamed through the SDK's
// stream helper (which assembles delta.tool_calls); prints what it got as one JSON line for
// test_serving_node.py to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });

const request = {
  model: "qwen",
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
  tools: [{
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] },
    },
  }],
  tool_choice: "required",
  parallel_tool_calls: false,
  seed: 1,
  temperature: 1.0,
  max_tokens: 200,
};

const whole = await client.chat.completions.create(request);
const runner = client.chat.completions.stream(request);
const deltas = [];
runner.on("chunk", (chunk) => {
  for (const c of chunk.choices) if (c.delta?.tool_calls) deltas.push(...c.delta.tool_calls);
});
const streamed = await runner.finalChatCompletion();

console.log(JSON.stringify({ whole: whole.choices[0], streamed: streamed.choices[0], deltas }));

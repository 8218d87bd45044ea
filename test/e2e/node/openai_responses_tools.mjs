// The OpenAI Node SDK's Responses API with function tools against a running uvlm:
// node openai_responses_tools.mjs BASE_URL
// responses.create with tool_choice "required", whole and streamed, then the call and its output
// sent back as function_call / function_call_output input items; prints what it got as one JSON
// line for test_serving_node.py to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });

const tools = [{
  type: "function",
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] },
  strict: false,
}];
const request = {
  model: "qwen",
  input: "What is the weather in Paris?",
  tools,
  tool_choice: "required",
  parallel_tool_calls: false,
  temperature: 0,
  max_output_tokens: 200,
};

const whole = await client.responses.create(request);

const stream = await client.responses.create({ ...request, stream: true });
const streamed = { types: [], deltas: [], sequence: [], final: null, done: null };
for await (const event of stream) {
  streamed.types.push(event.type);
  streamed.sequence.push(event.sequence_number);
  if (event.type === "response.function_call_arguments.delta") streamed.deltas.push(event.delta);
  if (event.type === "response.function_call_arguments.done") streamed.done = event.arguments;
  if (event.type === "response.completed") streamed.final = event.response;
}

const call = whole.output.find((o) => o.type === "function_call");
const next = await client.responses.create({
  model: "qwen",
  input: [
    { role: "user", content: "What is the weather in Paris?" },
    { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ temp: 21 }) },
  ],
  tools,
  tool_choice: "none",
  temperature: 0,
  max_output_tokens: 4,
});

console.log(JSON.stringify({
  whole: { status: whole.status, output: whole.output, tool_choice: whole.tool_choice, tools: whole.tools },
  streamed: { ...streamed, output: streamed.final.output },
  next: { status: next.status, types: next.output.map((o) => o.type), output_text: next.output_text },
}));

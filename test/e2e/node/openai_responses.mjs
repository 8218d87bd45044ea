// The OpenAI Node SDK's Responses API against a running uvlm: node openai_responses.mjs BASE_URL [API_KEY]
// responses.create without and with stream; prints what it got as one JSON line for
// test_serving_node.py to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3] ?? "unused", maxRetries: 0, timeout: 60000 });

const whole = await client.responses.create({
  model: "kjv-tiny",
  instructions: "Answer in the words of the King James Bible.",
  input: "And God said",
  max_output_tokens: 8,
  temperature: 0,
});

const stream = await client.responses.create({
  model: "kjv-tiny",
  input: [{ role: "user", content: [{ type: "input_text", text: "And God said" }] }],
  max_output_tokens: 8,
  temperature: 0,
  stream: true,
});
const streamed = { types: [], deltas: [], sequence: [], final: null };
for await (const event of stream) {
  streamed.types.push(event.type);
  streamed.sequence.push(event.sequence_number);
  if (event.type === "response.output_text.delta") streamed.deltas.push(event.delta);
  if (event.type === "response.completed" || event.type === "response.incomplete") streamed.final = event.response;
}

console.log(JSON.stringify({
  whole: { id: whole.id, object: whole.object, status: whole.status, model: whole.model,
           output_text: whole.output_text, usage: whole.usage, instructions: whole.instructions },
  streamed: { ...streamed, final: { id: streamed.final.id, status: streamed.final.status,
                                    text: streamed.final.output[0].content[0].text,
                                    usage: streamed.final.usage } },
}));

// LangChain JS against a running uvlm: node langchain_tools.mjs BASE_URL
// ChatOpenAI.bindTools with a required tool, and withStructuredOutput both through a forced
// function call and through the default method; prints what it got as one JSON line for
// test_serving_node.py to check.
import { ChatOpenAI } from "@langchain/openai";
import { tool } from "@langchain/core/tools";
import { z } from "zod";

const model = new ChatOpenAI({
  model: "qwen",
  apiKey: "unused",
  configuration: { baseURL: process.argv[2] },
  temperature: 1.0,
  maxTokens: 200,
  maxRetries: 0,
  modelKwargs: { seed: 1 },
});

const weather = tool(async ({ city }) => `sunny in ${city}`, {
  name: "get_weather",
  description: "The weather in a city",
  schema: z.object({ city: z.string().max(8) }),
});
const ai = await model.bindTools([weather], { tool_choice: "required", parallel_tool_calls: false })
  .invoke("What is the weather in Paris?");

// zod measures strings in UTF-16 units, JSON Schema in characters: a pattern keeps both to ASCII
const Person = z.object({ name: z.string().regex(/^[a-z]{1,8}$/), age: z.number().int().min(0).max(120) });
const viaTool = await model.withStructuredOutput(Person, { method: "functionCalling" }).invoke("Who is there?");
const viaDefault = await model.withStructuredOutput(Person).invoke("Who is there?");

console.log(JSON.stringify({ toolCalls: ai.tool_calls, viaTool, viaDefault }));

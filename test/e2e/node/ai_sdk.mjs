// The Vercel AI SDK's OpenAI provider (its default model speaks the Responses API) against a
// running uvlm: node ai_sdk.mjs BASE_URL [API_KEY]. generateText and streamText; prints what it got as one
// JSON line for test_serving_node.py to check.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const openai = createOpenAI({ baseURL: process.argv[2], apiKey: process.argv[3] ?? "unused" });
const model = openai("kjv-tiny");
const settings = { model, system: "Answer in the words of the King James Bible.", prompt: "And God said",
                   maxOutputTokens: 8, temperature: 0, maxRetries: 0 };

const generated = await generateText(settings);

let error = null;
const result = streamText({ ...settings, onError: ({ error: e }) => { error = String(e); } });
const parts = [];
for await (const part of result.textStream) parts.push(part);

console.log(JSON.stringify({
  generated: { text: generated.text, finishReason: generated.finishReason, usage: generated.usage,
               modelId: generated.response.modelId, responseId: generated.response.id },
  streamed: { parts, text: await result.text, finishReason: await result.finishReason,
              usage: await result.usage },
  error,
}));

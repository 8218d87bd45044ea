// The OpenAI Node SDK's embeddings.create against a running uvlm: node embeddings.mjs BASE_URL
// Embeds two texts as the SDK does by default (it asks for base64 and decodes the float32 values),
// then the same with encoding_format "float"; prints what it got as one JSON line for
// test_serving_embeddings.py to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });
const input = ["In the beginning God created the heaven and the earth.", "Jesus wept."];

const res = await client.embeddings.create({ model: "kjv-embed", input });
const flt = await client.embeddings.create({ model: "kjv-embed", input, encoding_format: "float" });

const vecs = res.data.map((d) => d.embedding);
const same = vecs.every((v, i) => v.length === flt.data[i].embedding.length &&
  v.every((x, j) => Math.abs(x - flt.data[i].embedding[j]) < 1e-6));
console.log(JSON.stringify({
  n: res.data.length,
  dims: vecs.map((v) => v.length),
  norms: vecs.map((v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0))),
  same_as_float: same,
  usage: res.usage,
  model: res.model,
}));

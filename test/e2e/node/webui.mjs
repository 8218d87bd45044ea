// The chat page at GET / in headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core;
// no browser is downloaded): node webui.mjs BASE_URL MODE SCREENSHOT_PATH
//   MODE "open":    stream an answer with n = 2, stop an answer mid-stream, render Markdown, reload;
//   MODE "key:KEY": the server runs with --api-key KEY: the page asks for the key on 401.
// Prints what it saw as one JSON line for test_webui.py to check; the checks live there.
import { chromium } from "playwright-core";

const [base, mode, shot] = process.argv.slice(2);
const CHROMIUM = process.env.UVLM_CHROMIUM || "/usr/bin/chromium";
const out = { console: [], pageErrors: [] };
const lastTurn = ".turn:last-of-type";

// --no-sandbox: Chromium's sandbox refuses to start as root, which CI runs as
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  // tall enough for the screenshot to hold the whole conversation of the "open" run
  const page = await browser.newPage({ viewport: { width: 1280, height: mode === "open" ? 1700 : 800 } });
  page.setDefaultTimeout(30000);
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") out.console.push(m.text()); });
  page.on("pageerror", (e) => out.pageErrors.push(String(e)));
  const chatRequests = [];
  page.on("request", (r) => {
    if (r.url().endsWith("/v1/chat/completions"))
      chatRequests.push({ headers: r.headers(), body: JSON.parse(r.postData() || "null") });
  });

  const res = await page.goto(base + "/");
  out.page = { status: res.status(), headers: res.headers() };
  if (mode === "open") await openFlow(page, chatRequests);
  else await keyFlow(page, chatRequests, mode.slice(4));
  out.screenshot = shot;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

// --- helpers -------------------------------------------------------------------------------------

async function setSettings(page, s) {
  for (const [id, v] of Object.entries(s)) await page.fill("#" + id, String(v));
}

async function send(page, text) {
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
}

// Every choice of the last turn has left the streaming states.
async function waitAnswered(page) {
  await page.waitForFunction((sel) => {
    const cs = [...document.querySelectorAll(sel + " .choice")];
    return cs.length > 0 && cs.every((c) => !["waiting", "streaming"].includes(c.dataset.state));
  }, lastTurn);
}

async function choices(page) {
  return page.$$eval(lastTurn + " .choice", (cs) => cs.map((c) => {
    const r = c.getBoundingClientRect();
    return { state: c.dataset.state, text: c.querySelector(".body").textContent,
             stats: c.querySelector(".stats").textContent, x: r.x, y: r.y, width: r.width };
  }));
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const m = text.match(new RegExp("^" + name + " (\\S+)$", "m"));
  return m ? Number(m[1]) : null;
}

async function health() {
  return (await fetch(base + "/health?detail=1")).json();
}

// --- open server -----------------------------------------------------------------------------------

async function openFlow(page, chatRequests) {
  await page.waitForFunction(() => /queue \d+ · sequences \d+ · KV in use \d+ \/ \d+/.test(
    document.getElementById("status").textContent));
  out.status = await page.textContent("#status");
  await page.waitForFunction(() => document.getElementById("model").textContent !== "");
  out.model = await page.textContent("#model");

  // 1. an answer with n = 2, side by side, with the settings in the request
  const settings = { system: "You answer in the words of the King James Bible.", temperature: 0.7, top_p: 0.9,
                     max_tokens: 400, n: 2 };
  await setSettings(page, settings);
  await send(page, "And God said");
  await waitAnswered(page);
  out.answer = { choices: await choices(page), request: chatRequests.at(-1).body };

  // 2. tokens arrive one by one, then Stop: a long answer (16 choices, each as long as the context
  // allows: seconds of work however busy the machine is) whose first choice's text is recorded at
  // every change, stopped after several of them
  const cancelledBefore = await metric("uvlm_requests_cancelled_total");
  await setSettings(page, { max_tokens: 5000, n: 16 });
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const choice = document.querySelector(".turn:last-of-type .choice");
      if (choice && choice.dataset.state === "streaming")
        window.__lengths.push(choice.querySelector(".body").textContent.length);
    }).observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
  });
  await send(page, "In the beginning");
  await page.waitForFunction(() => new Set(window.__lengths).size >= 5, null, { polling: "raf" });
  await page.click("#stop");
  await waitAnswered(page);
  const lengths = await page.evaluate(() => window.__lengths);
  const stopped = { updates: new Set(lengths).size, lengths: lengths.slice(0, 50), choices: await choices(page),
                    stopDisabled: await page.isDisabled("#stop"), request: chatRequests.at(-1).body, cancelledBefore };
  for (let i = 0; i < 100; i++) { // the server cancels when it sees the connection close
    stopped.cancelledAfter = await metric("uvlm_requests_cancelled_total");
    stopped.health = await health();
    if (stopped.cancelledAfter > cancelledBefore && stopped.health.active_sequences === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  out.stop = stopped;

  // 3. Markdown, from a canned stream (the model writes none): rendered, and nothing of it runs
  const md = "## Title\n\nSome **bold** and *italic* and `a <b> code`.\n\n- one\n- two\n\n1. first\n2. second\n\n" +
             "```js\nconst x = 1 < 2;\n```\n\n[safe](https://example.com/a?b=1&c=2) [bad](javascript:window.__pwned=3) " +
             "<img src=x onerror=\"window.__pwned=1\"> <script>window.__pwned=2</script>\n\n> quoted";
  const pieces = md.match(/[\s\S]{1,7}/g);
  const events = pieces.map((p, i) => "data: " + JSON.stringify({
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta: i ? { content: p } : { role: "assistant", content: p }, finish_reason: null }],
  }) + "\n\n").join("") + "data: " + JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
    "\n\ndata: [DONE]\n\n";
  await page.route("**/v1/chat/completions", (route) =>
    route.fulfill({ status: 200, contentType: "text/event-stream", body: events }));
  await setSettings(page, { max_tokens: 400, n: 1 });
  await send(page, "Show me some Markdown");
  await waitAnswered(page);
  await page.unroute("**/v1/chat/completions");
  out.markdown = await page.$eval(lastTurn + " .choice .body", (b) => ({
    h2: [...b.querySelectorAll("h2")].map((e) => e.textContent),
    strong: [...b.querySelectorAll("strong")].map((e) => e.textContent),
    em: [...b.querySelectorAll("em")].map((e) => e.textContent),
    inlineCode: [...b.querySelectorAll(":not(pre) > code")].map((e) => e.textContent),
    ul: [...b.querySelectorAll("ul > li")].map((e) => e.textContent),
    ol: [...b.querySelectorAll("ol > li")].map((e) => e.textContent),
    pre: [...b.querySelectorAll("pre code")].map((e) => e.textContent),
    lang: [...b.querySelectorAll("pre .lang")].map((e) => e.textContent),
    links: [...b.querySelectorAll("a")].map((e) => e.getAttribute("href")),
    quote: [...b.querySelectorAll("blockquote")].map((e) => e.textContent),
    elements: [...new Set([...b.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()))].sort(),
    text: b.textContent,
    pwned: window.__pwned ?? null,
  }));

  // 4. settings survive a reload (localStorage); the screenshot is taken before it
  await page.screenshot({ path: shot });
  await page.reload();
  await page.waitForSelector("#prompt");
  out.reloaded = await page.$eval("#settings", () => Object.fromEntries(
    ["system", "temperature", "top_p", "max_tokens", "n"].map((id) => [id, document.getElementById(id).value])));
  out.storedSettings = await page.evaluate(() => JSON.parse(localStorage.getItem("uvlm.webui.settings")));
}

// --- server with --api-key -------------------------------------------------------------------------

async function keyFlow(page, chatRequests, key) {
  await page.waitForFunction(() => document.getElementById("model").textContent === "API key needed");
  await setSettings(page, { max_tokens: 24, n: 1 });
  await send(page, "And God said");
  await page.waitForSelector("#key-dialog[open]");
  out.firstAsk = await page.textContent("#key-why");
  await page.fill("#key-input", "not-the-key");
  await page.click("#key-save");
  await page.waitForFunction(() => document.getElementById("key-dialog").open &&
    /refused/.test(document.getElementById("key-why").textContent));
  out.secondAsk = await page.textContent("#key-why");
  await page.screenshot({ path: shot });
  await page.fill("#key-input", key);
  await page.click("#key-save");
  await waitAnswered(page);
  out.answer = await choices(page);
  out.sentKeys = chatRequests.map((r) => r.headers.authorization || null);
  out.sessionKey = await page.evaluate(() => sessionStorage.getItem("uvlm.webui.apiKey"));
  out.keyInLocalStorage = await page.evaluate((k) => Object.values(localStorage).some((v) => v.includes(k)), key);

  // a reload keeps the key for this tab: no question, and the model's name shows
  await page.reload();
  await page.waitForFunction(() => !["", "API key needed"].includes(document.getElementById("model").textContent));
  out.modelAfterReload = await page.textContent("#model");
  const before = chatRequests.length;
  await send(page, "In the beginning");
  await waitAnswered(page);
  out.afterReload = { answer: await choices(page), asked: await page.$eval("#key-dialog", (d) => d.open),
                      sentKeys: chatRequests.slice(before).map((r) => r.headers.authorization || null) };
}

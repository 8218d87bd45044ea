// The chat page's script (src/api/webui.h): no framework, no build step, nothing fetched from
// elsewhere. It streams POST /v1/chat/completions (server-sent events read with fetch and a
// ReadableStream), renders the answers as a small safe Markdown subset, and polls
// GET /health?detail=1 for the status bar.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const SETTINGS_KEY = 'uvlm.webui.settings'; // localStorage: kept across reloads and tabs
  const API_KEY_KEY = 'uvlm.webui.apiKey';    // sessionStorage: this tab only
  const DEFAULTS = { system: '', temperature: 0.8, top_p: 0.95, max_tokens: 512, n: 1 };
  const NUMBERS = ['temperature', 'top_p', 'max_tokens', 'n'];
  const STATUS_EVERY_MS = 3000;

  // --- Markdown --------------------------------------------------------------------------------
  // The text is escaped first; markup is then made only from the escaped text, so nothing the
  // model writes becomes HTML of its own. Links keep http(s) and mailto targets only.

  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  // Inline markup of one escaped line: code spans and links are set aside first (placeholders
  // \u0000N\u0000, which escaped text cannot hold) so emphasis never reaches inside them.
  function inline(raw) {
    const kept = [];
    const keep = (html) => '\u0000' + (kept.push(html) - 1) + '\u0000';
    let s = raw.replace(/\u0000/g, '');
    s = s.replace(/`([^`]+)`/g, (_, code) => keep('<code>' + esc(code) + '</code>'));
    s = esc(s);
    s = s.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (m, label, url) =>
      SAFE_URL.test(url) ? keep('<a href="' + url + '" rel="noopener noreferrer" target="_blank">' + label + '</a>') : m);
    s = s.replace(/\*\*(?=\S)(.+?)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^\w])__(?=\S)(.+?)__(?!\w)/g, '$1<strong>$2</strong>');
    s = s.replace(/(^|[^*\w])\*(?=[^\s*])(.+?)\*(?![*\w])/g, '$1<em>$2</em>');
    s = s.replace(/(^|[^\w])_(?=[^\s_])(.+?)_(?!\w)/g, '$1<em>$2</em>');
    s = s.replace(/~~(?=\S)(.+?)~~/g, '<del>$1</del>');
    // a link's label may hold a code span: restore until none is left (each pass undoes one level)
    for (let pass = 0; pass < 3 && s.includes('\u0000'); pass++) s = s.replace(/\u0000(\d+)\u0000/g, (_, i) => kept[+i]);
    return s;
  }

  const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;

  // Block markup: fenced code (an unclosed fence runs to the end, as while it streams),
  // headings, rules, lists, quotes and paragraphs.
  function markdown(text) {
    const lines = text.split(/\r?\n/);
    const out = [];
    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        const close = new RegExp('^\\s{0,3}' + m[1][0] + '{' + m[1].length + ',}\\s*$');
        const code = [];
        for (i++; i < lines.length && !close.test(lines[i]); i++) code.push(lines[i]);
        i++;
        out.push('<pre>' + (m[2] ? '<span class="lang">' + esc(m[2]) + '</span>' : '') +
                 '<code>' + esc(code.join('\n')) + '</code></pre>');
      } else if ((m = HEADING.exec(line))) {
        const h = 'h' + m[1].length;
        out.push('<' + h + '>' + inline(m[2]) + '</' + h + '>');
        i++;
      } else if (RULE.test(line)) {
        out.push('<hr>');
        i++;
      } else if ((m = ITEM.exec(line))) {
        const ordered = /\d/.test(m[1]);
        const items = [];
        while (i < lines.length && (m = ITEM.exec(lines[i])) && /\d/.test(m[1]) === ordered) {
          items.push('<li>' + inline(m[2]) + '</li>');
          i++;
        }
        const tag = ordered ? 'ol' : 'ul';
        out.push('<' + tag + '>' + items.join('') + '</' + tag + '>');
      } else if (QUOTE.test(line)) {
        const quoted = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { quoted.push(inline(m[1])); i++; }
        out.push('<blockquote>' + quoted.join('<br>') + '</blockquote>');
      } else if (!line.trim()) {
        i++;
      } else {
        const para = [];
        while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i]) &&
               !ITEM.test(lines[i]) && !QUOTE.test(lines[i]) && !RULE.test(lines[i])) {
          para.push(inline(lines[i]));
          i++;
        }
        out.push('<p>' + para.join('<br>') + '</p>');
      }
    }
    return out.join('');
  }

  // The only way HTML enters the page: where the browser enforces Trusted Types (the server's
  // CSP asks for it), innerHTML takes nothing but what this policy made from escaped text.
  const policy = window.trustedTypes
    ? window.trustedTypes.createPolicy('uvlm-markdown', { createHTML: markdown })
    : { createHTML: markdown };

  // --- settings ------------------------------------------------------------------------------

  function loadSettings() {
    let saved = {};
    try { saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) || '{}') || {}; } catch (e) { saved = {}; }
    const s = Object.assign({}, DEFAULTS);
    if (typeof saved.system === 'string') s.system = saved.system;
    for (const k of NUMBERS) if (typeof saved[k] === 'number' && isFinite(saved[k])) s[k] = saved[k];
    return s;
  }

  function showSettings(s) {
    $('system').value = s.system;
    for (const k of NUMBERS) $(k).value = String(s[k]);
  }

  // The form's values, each number clamped to its field's range (an empty or bad field: default).
  function readSettings() {
    const s = { system: $('system').value };
    for (const k of NUMBERS) {
      const el = $(k);
      let v = parseFloat(el.value);
      if (!isFinite(v)) v = DEFAULTS[k];
      v = Math.min(Math.max(v, parseFloat(el.min)), parseFloat(el.max));
      s[k] = el.step === '1' ? Math.round(v) : v;
    }
    return s;
  }

  function saveSettings() {
    try { localStorage.setItem(SETTINGS_KEY, JSON.stringify(readSettings())); } catch (e) { /* storage off */ }
  }

  // --- API key -------------------------------------------------------------------------------

  const apiKey = () => { try { return sessionStorage.getItem(API_KEY_KEY) || ''; } catch (e) { return ''; } };

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const key = apiKey();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  // Ask for a key in the dialog; resolves true when one was given (and stored), false on cancel.
  function askKey(why) {
    const dialog = $('key-dialog');
    $('key-why').textContent = why;
    $('key-input').value = apiKey();
    return new Promise((resolve) => {
      const done = (ok) => {
        $('key-form').removeEventListener('submit', onSubmit);
        $('key-cancel').removeEventListener('click', onCancel);
        dialog.removeEventListener('cancel', onCancel);
        if (dialog.open) dialog.close();
        resolve(ok);
      };
      const onSubmit = (e) => {
        e.preventDefault();
        const key = $('key-input').value.trim();
        try {
          if (key) sessionStorage.setItem(API_KEY_KEY, key);
          else sessionStorage.removeItem(API_KEY_KEY);
        } catch (err) { /* storage off: asked again on the next 401 */ }
        done(!!key);
        loadModel();
      };
      const onCancel = (e) => { e.preventDefault(); done(false); };
      $('key-form').addEventListener('submit', onSubmit);
      $('key-cancel').addEventListener('click', onCancel);
      dialog.addEventListener('cancel', onCancel);
      dialog.showModal();
      $('key-input').focus();
    });
  }

  async function errorMessage(res) {
    try {
      const body = await res.json();
      if (body && body.error) return body.error.message || JSON.stringify(body.error);
    } catch (e) { /* not JSON */ }
    return 'HTTP ' + res.status;
  }

  // --- conversation --------------------------------------------------------------------------

  const turns = [];  // {user, choices: [choice], chosen}
  let running = null; // the turn being answered: {turn, controller}

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const log = $('log');
  const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 80;

  function addTurn(text, n) {
    $('empty').hidden = true;
    const turn = { user: text, choices: [], chosen: 0, node: el('section', 'turn') };
    turn.node.setAttribute('aria-label', 'Turn ' + (turns.length + 1));
    turn.node.append(el('div', 'user', text));
    const row = el('div', 'choices');
    for (let i = 0; i < n; i++) {
      const c = { text: '', tokens: 0, first: 0, last: 0, finish: '', node: el('article', 'choice'),
                  body: el('div', 'body'), stats: el('p', 'stats', 'waiting…'), dirty: false };
      c.node.dataset.state = 'waiting';
      c.node.setAttribute('aria-busy', 'true');
      if (n > 1) {
        const head = el('header');
        head.append(el('span', '', 'Choice ' + (i + 1)));
        const use = el('button', 'quiet', 'continue');
        use.type = 'button';
        use.title = 'Continue the conversation with this choice';
        use.addEventListener('click', () => choose(turn, i));
        head.append(use);
        c.use = use;
        c.node.append(head);
      }
      c.node.append(c.body, c.stats);
      row.append(c.node);
      turn.choices.push(c);
    }
    turn.node.append(row);
    log.append(turn.node);
    turns.push(turn);
    choose(turn, 0);
    log.scrollTop = log.scrollHeight;
    return turn;
  }

  function choose(turn, i) {
    turn.chosen = i;
    turn.choices.forEach((c, k) => {
      c.node.classList.toggle('chosen', k === i && turn.choices.length > 1);
      if (c.use) c.use.setAttribute('aria-pressed', String(k === i));
    });
  }

  function messages(settings) {
    const m = [];
    if (settings.system.trim()) m.push({ role: 'system', content: settings.system });
    for (const t of turns) {
      m.push({ role: 'user', content: t.user });
      const answer = t.choices[t.chosen];
      if (answer && answer.text) m.push({ role: 'assistant', content: answer.text });
    }
    return m;
  }

  function statsText(c, t0) {
    const parts = [];
    if (c.first) parts.push('first token ' + Math.round(c.first - t0) + ' ms');
    // generation speed: the server's own figure when it sends one (llama.cpp's timings), else the
    // tokens after the first over the time they took to arrive (when that is long enough to tell)
    if (c.speed) parts.push(c.speed.toFixed(1) + ' tokens/s');
    else if (c.tokens > 1 && c.last - c.first >= 20) parts.push(((c.tokens - 1) * 1000 / (c.last - c.first)).toFixed(1) + ' tokens/s');
    // exact from the usage chunk (n = 1); with n > 1 the count of pieces received, which a piece
    // holding more than one token's text (a character split across tokens) makes a little lower
    parts.push((c.finish && !c.exact ? '≈' : '') + c.tokens + (c.tokens === 1 ? ' token' : ' tokens'));
    if (c.finish) parts.push(c.finish);
    return parts.join(' · ');
  }

  // Rendering is batched to one pass per frame: tokens can arrive faster than the screen redraws.
  let frame = 0;
  function paint(turn, t0) {
    const follow = nearBottom();
    for (const c of turn.choices) {
      if (!c.dirty) continue;
      c.dirty = false;
      c.body.innerHTML = policy.createHTML(c.text);
      c.stats.textContent = statsText(c, t0);
    }
    if (follow) log.scrollTop = log.scrollHeight;
  }
  function render(turn, t0) {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; paint(turn, t0); });
  }
  // At the end of an answer: paint now, so that a finished choice always shows its whole text.
  function flush(turn, t0) {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    paint(turn, t0);
  }

  // One server-sent event's data (a chat.completion.chunk) into the turn.
  function onChunk(turn, chunk, t0) {
    if (chunk.error) throw new Error(chunk.error.message || 'error');
    const now = performance.now();
    for (const ch of chunk.choices || []) {
      const c = turn.choices[ch.index];
      if (!c) continue;
      const piece = ch.delta && ch.delta.content;
      if (typeof piece === 'string' && piece) {
        if (!c.first) { c.first = now; c.node.dataset.state = 'streaming'; }
        c.text += piece;
        c.tokens++;
        c.last = now;
      }
      if (ch.finish_reason) c.finish = ch.finish_reason;
      c.dirty = true;
    }
    // n = 1: the usage chunk's count is exact (it covers all choices of a request)
    if (turn.choices.length === 1) {
      const c = turn.choices[0];
      if (chunk.usage && chunk.usage.completion_tokens) {
        c.tokens = chunk.usage.completion_tokens;
        c.exact = true;
      }
      if (chunk.timings && chunk.timings.predicted_per_second > 0) c.speed = chunk.timings.predicted_per_second;
    }
    render(turn, t0);
  }

  async function readEvents(res, turn, t0) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data) continue; // a comment (": ping")
        if (data === '[DONE]') return;
        onChunk(turn, JSON.parse(data), t0);
      }
    }
  }

  function finishTurn(turn, state, message) {
    for (const c of turn.choices) {
      if (c.node.dataset.state === 'done') continue;
      if (state === 'stopped' && !c.finish) c.finish = 'stopped';
      c.node.dataset.state = c.finish && c.finish !== 'stopped' ? 'done' : state;
      c.node.setAttribute('aria-busy', 'false');
      c.dirty = true;
    }
    if (message) {
      const err = el('p', 'error', message);
      err.setAttribute('role', 'alert');
      turn.node.append(err);
    }
    running = null;
    $('stop').disabled = true;
    $('send').disabled = false;
    flush(turn, turn.t0);
    pollStatus(); // the sequences just ended: show it now, not at the next poll
  }

  async function send() {
    const text = $('prompt').value.trim();
    if (!text || running) return;
    const settings = readSettings();
    saveSettings();
    const msgs = messages(settings).concat([{ role: 'user', content: text }]);
    const turn = addTurn(text, settings.n);
    const controller = new AbortController();
    running = { turn, controller };
    $('prompt').value = '';
    $('send').disabled = true;
    $('stop').disabled = false;
    const body = JSON.stringify({
      messages: msgs, stream: true, stream_options: { include_usage: true },
      temperature: settings.temperature, top_p: settings.top_p, max_tokens: settings.max_tokens, n: settings.n,
    });
    try {
      for (;;) {
        turn.t0 = performance.now();
        const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body, signal: controller.signal });
        if (res.status === 401) {
          const why = apiKey() ? 'The server refused this key.' : 'This server needs an API key.';
          if (await askKey(why)) continue;
          throw new Error('An API key is needed (the server answered 401).');
        }
        if (!res.ok) throw new Error(await errorMessage(res));
        await readEvents(res, turn, turn.t0);
        break;
      }
      finishTurn(turn, 'done');
    } catch (e) {
      if (controller.signal.aborted) {
        finishTurn(turn, 'stopped');
      } else {
        controller.abort(); // an error event or a bad chunk: let go of the rest of the stream
        finishTurn(turn, 'error', e.message || String(e));
      }
    }
    $('prompt').focus();
  }

  // Aborting the fetch closes the connection; the server cancels a sequence whose client left.
  function stop() {
    if (running) running.controller.abort();
  }

  // --- header and status bar -----------------------------------------------------------------

  async function loadModel() {
    try {
      const res = await fetch('/v1/models', { headers: headers() });
      if (res.status === 401) { $('model').textContent = 'API key needed'; return; }
      if (!res.ok) { $('model').textContent = ''; return; }
      const body = await res.json();
      $('model').textContent = body.data && body.data[0] ? body.data[0].id : '';
    } catch (e) {
      $('model').textContent = '';
    }
  }

  async function pollStatus() {
    const dot = $('status-dot');
    let text;
    let ok = false;
    try {
      const res = await fetch('/health?detail=1', { cache: 'no-store' });
      const h = await res.json();
      ok = res.ok && h.status === 'ok';
      text = h.status;
      if (typeof h.kv_cells_total === 'number') {
        const used = h.kv_cells_total - h.kv_cells_free;
        const pct = h.kv_cells_total ? Math.round((100 * used) / h.kv_cells_total) : 0;
        text += ' · queue ' + h.queue + ' · sequences ' + h.active_sequences +
                ' · KV in use ' + used + ' / ' + h.kv_cells_total + ' cells (' + pct + '%)' +
                ' · ' + Number(h.tokens_per_second || 0).toFixed(0) + ' tokens/s';
      }
    } catch (e) {
      text = 'server unreachable';
    }
    $('status').textContent = text;
    dot.classList.toggle('ok', ok);
    dot.classList.toggle('bad', !ok);
    if (ok && !$('model').textContent) loadModel(); // the model had not loaded yet
  }

  // --- wiring --------------------------------------------------------------------------------

  showSettings(loadSettings());
  $('settings').addEventListener('input', saveSettings);
  $('settings').addEventListener('change', () => { showSettings(readSettings()); saveSettings(); });
  $('settings').addEventListener('submit', (e) => e.preventDefault());
  $('reset-settings').addEventListener('click', () => { showSettings(DEFAULTS); saveSettings(); });
  $('new-chat').addEventListener('click', () => {
    stop();
    turns.length = 0;
    for (const t of log.querySelectorAll('.turn')) t.remove();
    $('empty').hidden = false;
    $('prompt').focus();
  });
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('stop').addEventListener('click', stop);
  $('key-button').addEventListener('click', () => askKey('Key for this server (empty it to send none).'));
  loadModel();
  pollStatus();
  setInterval(pollStatus, STATUS_EVERY_MS);
  $('prompt').focus();
})();

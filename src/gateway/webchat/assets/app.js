/**
 * Ferry web chat: the page's behaviour, dependency-free (ES2020, no build step).
 *
 * Speaks the gateway's WebSocket protocol (docs/gateway-protocol.md) on `/ws`: a `connect`
 * handshake with a client id kept in localStorage, `chat.history` on every (re)connect,
 * `chat.send` / `chat.abort` from the composer, and `chat` / `agent` events rendered as
 * streaming bubbles with tool chips. Reconnects with backoff; unacknowledged messages stay on
 * screen and are re-sent with the same idempotency key, so the gateway never runs one twice.
 * Assistant text is untrusted: `renderMarkdown` escapes all HTML before adding its own tags.
 */
"use strict";

(() => {
  /** Delays between reconnect attempts; the last one repeats. */
  const BACKOFF_MS = [1000, 2000, 5000, 10000];
  /** Within this many pixels of the bottom, new content keeps the view pinned to the bottom. */
  const NEAR_BOTTOM_PX = 96;
  /** How long a `health` probe of a quiet socket may take before the socket counts as dead. */
  const PROBE_MS = 10000;
  const CLIENT_ID_KEY = "ferry.webchat.clientId";
  const TOKEN_KEY = "ferry.webchat.token";
  const DRAFT_KEY = "ferry.webchat.draft";

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("status"), statusText: document.querySelector("#status .status-text"),
    newChat: $("new-chat"), scroller: $("scroller"), messages: $("messages"), empty: $("empty"),
    jump: $("jump"), form: $("composer-form"), input: $("composer"), send: $("send"),
  };

  // ---------------------------------------------------------------- identity

  function uuid() {
    if (window.crypto && typeof crypto.randomUUID === "function") return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16)); // also on plain http, unlike randomUUID
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  /** Storage that degrades to memory when the browser refuses (private mode, disabled storage). */
  function store(kind) {
    const memory = new Map();
    return {
      get(k) { try { return window[kind].getItem(k); } catch { return memory.has(k) ? memory.get(k) : null; } },
      set(k, v) { try { window[kind].setItem(k, v); } catch { memory.set(k, v); } },
      remove(k) { try { window[kind].removeItem(k); } catch { memory.delete(k); } },
    };
  }
  const local = store("localStorage");
  const session = store("sessionStorage");

  function clientId() {
    let id = local.get(CLIENT_ID_KEY);
    if (!id) { id = `webchat-${uuid()}`; local.set(CLIENT_ID_KEY, id); }
    return id;
  }

  /** `?token=` moves into sessionStorage and out of the address bar (and history, and screenshots). */
  function takeToken() {
    const url = new URL(location.href);
    const fromUrl = url.searchParams.get("token");
    if (fromUrl !== null) {
      session.set(TOKEN_KEY, fromUrl);
      url.searchParams.delete("token");
      history.replaceState(history.state, "", url.pathname + url.search + url.hash);
    }
    return session.get(TOKEN_KEY);
  }

  // ---------------------------------------------------------------- connection

  const conn = {
    ws: null, ready: false, sessionKey: null, attempt: 0, nextId: 1, retryTimer: 0,
    pending: new Map(), lastFrameAt: 0, tickMs: 30000, probing: false, authFailed: false,
  };
  /** Messages typed but not yet acknowledged, by idempotency key: re-sent after a reconnect. */
  const outbox = new Map();

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    ui.statusText.textContent = text || { connecting: "Connecting…", online: "Online", offline: "Offline" }[state];
    ui.newChat.disabled = state !== "online";
  }

  function connect() {
    clearTimeout(conn.retryTimer);
    if (conn.ws || conn.authFailed) return;
    setStatus("connecting");
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let ws;
    try { ws = new WebSocket(`${scheme}//${location.host}/ws`); } catch { scheduleReconnect(); return; }
    conn.ws = ws;
    ws.onopen = () => handshake(ws);
    ws.onmessage = (ev) => { if (conn.ws === ws) onFrame(ev.data); };
    ws.onclose = () => { if (conn.ws === ws) onDisconnect(); };
  }

  function handshake(ws) {
    const token = session.get(TOKEN_KEY);
    const params = { client: { id: clientId(), version: "1.0" } };
    if (token) params.auth = { token };
    request("connect", params, ws).then((hello) => {
      conn.ready = true;
      conn.attempt = 0;
      conn.sessionKey = hello.sessionKey;
      if (hello.tickIntervalMs) conn.tickMs = hello.tickIntervalMs;
      setStatus("online");
      loadHistory();
    }, (err) => {
      if (err.code === "UNAUTHORIZED") {
        conn.authFailed = true;
        setStatus("offline", "Access token needed");
        ui.status.title = "Open this page with ?token=<gateway.auth_token> in the address.";
      }
      ws.close();
    });
  }

  function onDisconnect() {
    conn.ws = null;
    conn.ready = false;
    for (const { reject } of conn.pending.values()) reject({ code: "DISCONNECTED", lost: true });
    conn.pending.clear();
    for (const run of runs.values()) if (run.live) finishRun(run, "stopped", "Connection lost");
    setTyping(false);
    if (!conn.authFailed) { setStatus("offline"); scheduleReconnect(); }
  }

  function scheduleReconnect() {
    const delay = BACKOFF_MS[Math.min(conn.attempt, BACKOFF_MS.length - 1)];
    conn.attempt += 1;
    ui.status.title = `Reconnecting in ${delay / 1000} s`;
    clearTimeout(conn.retryTimer);
    conn.retryTimer = setTimeout(connect, delay);
  }

  /** Sends one request; resolves with its payload, rejects with `{code, message}`. */
  function request(method, params, ws = conn.ws) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) { reject({ code: "DISCONNECTED", lost: true }); return; }
      const id = String(conn.nextId++);
      conn.pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ type: "req", id, method, params }));
    });
  }

  function onFrame(data) {
    conn.lastFrameAt = Date.now();
    let frame;
    try { frame = JSON.parse(data); } catch { return; }
    if (frame.type === "res") {
      const waiter = conn.pending.get(frame.id);
      if (!waiter) return;
      conn.pending.delete(frame.id);
      if (frame.ok) waiter.resolve(frame.payload || {});
      else waiter.reject(frame.error || { code: "UNKNOWN", message: "Request failed" });
    } else if (frame.type === "event" && frame.payload) {
      if (frame.payload.sessionKey && frame.payload.sessionKey !== conn.sessionKey) return;
      if (frame.event === "chat") onChat(frame.payload);
      else if (frame.event === "agent") onAgent(frame.payload);
    }
  }

  // A live socket gets a `tick` every tickIntervalMs. After a longer silence, ask `health`; no
  // answer within PROBE_MS means the connection is dead (a laptop woke up, a proxy dropped it).
  setInterval(() => {
    if (!conn.ready || conn.probing || Date.now() - conn.lastFrameAt < conn.tickMs * 1.5) return;
    const ws = conn.ws;
    conn.probing = true;
    const timer = setTimeout(() => { if (conn.ws === ws) { ws.close(); onDisconnect(); } }, PROBE_MS);
    request("health", {}).catch(() => {}).finally(() => { clearTimeout(timer); conn.probing = false; });
  }, 5000);
  const reconnectNow = () => { if (!conn.ws && !document.hidden) { conn.attempt = 0; connect(); } };
  window.addEventListener("online", reconnectNow);
  document.addEventListener("visibilitychange", reconnectNow);

  // ---------------------------------------------------------------- history

  function loadHistory() {
    request("chat.history", {}).then((payload) => {
      clearMessages();
      for (const m of payload.messages || []) {
        if (m.role === "user") addBubble("user", "sent", m.text);
        else if (m.role === "assistant") addBubble("assistant", "final", m.text);
      }
      for (const item of outbox.values()) { ui.messages.appendChild(item.el); sendItem(item); }
      scrollToBottom();
    }, () => {
      for (const item of outbox.values()) sendItem(item);
    });
  }

  function clearMessages() {
    runs.clear();
    typing = null;
    for (const node of [...ui.messages.children]) if (node !== ui.empty) node.remove();
    updateEmpty();
  }

  // ---------------------------------------------------------------- bubbles

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function updateEmpty() {
    ui.empty.hidden = ui.messages.querySelector(".msg") !== null;
  }

  /** Runs `change` on the message list, keeping the view at the bottom if it was there. */
  function mutate(change) {
    const s = ui.scroller;
    const [pinned, height] = [s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM_PX, s.scrollHeight];
    const result = change();
    updateEmpty();
    if (pinned) scrollToBottom();
    else if (s.scrollHeight > height) ui.jump.hidden = false;
    updateSendButton();
    return result;
  }

  function scrollToBottom() {
    ui.scroller.scrollTop = ui.scroller.scrollHeight;
    ui.jump.hidden = true;
  }

  const DOTS = '<span class="dots"><i></i><i></i><i></i></span>';

  /** Appends a bubble. User text is shown as typed; a "typing" assistant bubble shows dots. */
  function addBubble(role, state, text = "") {
    const msg = el("div", `msg ${role}`);
    msg.dataset.state = state;
    const main = el("div", "msg-main");
    if (role === "assistant") main.appendChild(el("div", "tools"));
    main.append(el("div", "msg-body", role === "user" ? text : undefined), el("div", "msg-meta"));
    if (role === "assistant") msg.appendChild(el("div", "avatar", "F"));
    msg.appendChild(main);
    ui.messages.appendChild(msg);
    if (role === "assistant") {
      msg.querySelector(".msg-body").innerHTML = state === "typing" ? DOTS : renderMarkdown(text);
    }
    return msg;
  }

  function setBody(msg, text) {
    msg.querySelector(".msg-body").innerHTML = renderMarkdown(text || "");
  }

  function setMeta(msg, text, retry) {
    const meta = msg.querySelector(".msg-meta");
    meta.textContent = text || "";
    if (retry) {
      const button = el("button", "link-btn", "Retry");
      button.type = "button";
      button.addEventListener("click", retry);
      meta.append(" ", button);
    }
  }

  // ---------------------------------------------------------------- runs

  /** One assistant bubble per runId: `{el, live}`; `live` while it may still stream. */
  const runs = new Map();
  /** A "thinking" bubble shown from a send until the reply's first event. */
  let typing = null;

  function setTyping(on) {
    if (on && !typing) typing = mutate(() => addBubble("assistant", "typing"));
    else if (!on && typing) mutate(() => { typing.remove(); typing = null; });
  }

  function runFor(runId) {
    let run = runs.get(runId);
    if (!run) {
      setTyping(false);
      run = { el: mutate(() => addBubble("assistant", "typing")), live: true };
      run.el.dataset.run = runId;
      runs.set(runId, run);
    }
    return run;
  }

  function finishRun(run, state, note) {
    run.live = false;
    run.el.dataset.state = state;
    if (run.el.querySelector(".dots")) run.el.querySelector(".msg-body").textContent = "";
    if (note) setMeta(run.el, note);
    updateSendButton();
  }

  function onChat(p) {
    const text = p.message && typeof p.message.text === "string" ? p.message.text : null;
    if (p.state === "delta") {
      const run = runFor(p.runId);
      if (!run.live || text === null) return;
      mutate(() => { run.el.dataset.state = "streaming"; setBody(run.el, text); });
    } else if (p.state === "final") {
      setTyping(false);
      if (text === null) {
        const run = runs.get(p.runId);
        if (run) { run.el.remove(); runs.delete(p.runId); mutate(() => {}); }
        return;
      }
      const run = runFor(p.runId);
      mutate(() => { setBody(run.el, text); finishRun(run, "final"); });
    } else if (p.state === "aborted") {
      setTyping(false);
      const run = runFor(p.runId);
      mutate(() => {
        if (text !== null) setBody(run.el, text);
        finishRun(run, "stopped", "Stopped");
      });
    } else if (p.state === "error") {
      setTyping(false);
      const run = runFor(p.runId);
      mutate(() => finishRun(run, "error", p.errorMessage || "Something went wrong."));
    }
  }

  function onAgent(p) {
    const data = p.data || {};
    if (p.stream === "lifecycle" && data.phase === "start") {
      runFor(p.runId);
    } else if (p.stream === "lifecycle" && (data.phase === "end" || data.phase === "error")) {
      // The chat `final` normally settles the bubble; this only clears dots that would stay.
      const run = runs.get(p.runId);
      if (!run || !run.live || !run.el.querySelector(".dots")) return;
      if (run.el.querySelector(".chip")) mutate(() => finishRun(run, "final"));
      else { run.el.remove(); runs.delete(p.runId); mutate(() => {}); }
    } else if (p.stream === "tool" && (data.phase === "start" || data.phase === "result")) {
      const run = runFor(p.runId);
      const tools = run.el.querySelector(".tools");
      const id = data.toolCallId || data.name;
      const name = data.name || "tool";
      const [state, label] = data.phase === "start" ? ["running", `🔧 ${name}…`]
        : data.isError ? ["error", `✗ ${name}`] : ["ok", `✓ ${name}`];
      mutate(() => {
        let chip = [...tools.children].find((c) => c.dataset.call === id);
        if (!chip) chip = tools.appendChild(el("span", "chip"));
        Object.assign(chip.dataset, { call: id, state });
        chip.textContent = label;
        chip.title = state === "error" ? `${name} failed` : name;
      });
    }
  }

  // ---------------------------------------------------------------- sending

  function busy() {
    return typing !== null || [...runs.values()].some((r) => r.live);
  }

  function updateSendButton() {
    const stop = busy() && ui.input.value.trim() === "";
    ui.send.classList.toggle("stop", stop);
    ui.send.setAttribute("aria-label", stop ? "Stop" : "Send");
    ui.send.title = stop ? "Stop the reply" : "Send (Enter)";
    ui.send.disabled = !stop && ui.input.value.trim() === "";
  }

  function sendMessage(text) {
    const item = { key: uuid(), text, el: null };
    mutate(() => { item.el = addBubble("user", "pending", text); });
    scrollToBottom();
    outbox.set(item.key, item);
    sendItem(item);
  }

  function sendItem(item) {
    item.el.dataset.state = "pending";
    if (!conn.ready) { setMeta(item.el, "Waiting for connection…"); return; }
    if (item.inFlight) return;
    item.inFlight = true;
    setMeta(item.el, "");
    if (!runs.has(item.key)) setTyping(true);
    request("chat.send", { message: item.text, idempotencyKey: item.key }).then(() => {
      item.inFlight = false;
      outbox.delete(item.key);
      item.el.dataset.state = "sent";
    }, (err) => {
      item.inFlight = false;
      if (err.lost) return; // still in the outbox: re-sent with the same key after reconnecting
      setTyping(false);
      outbox.delete(item.key);
      item.el.dataset.state = "error";
      setMeta(item.el, `Not sent: ${err.message || err.code}`, () => {
        item.key = uuid(); // the failed key would answer with the same error
        outbox.set(item.key, item);
        sendItem(item);
      });
    });
  }

  function stop() {
    request("chat.abort", {}).catch(() => {});
    setTyping(false);
  }

  function newChat() {
    if (!conn.ready) return;
    mutate(() => {
      clearMessages();
      for (const item of outbox.values()) ui.messages.appendChild(item.el);
    });
    request("chat.send", { message: "/new", idempotencyKey: uuid() }).catch((err) => {
      if (err.lost) return; // the reconnect's history shows whatever happened
      const msg = mutate(() => addBubble("assistant", "error"));
      setMeta(msg, `Could not start a new chat: ${err.message || err.code}`);
    });
    ui.input.focus();
  }

  // ---------------------------------------------------------------- composer

  function autosize() {
    ui.input.style.height = "auto";
    ui.input.style.height = `${Math.min(ui.input.scrollHeight, 200)}px`;
  }

  ui.input.value = local.get(DRAFT_KEY) || "";
  autosize();
  ui.input.addEventListener("input", () => {
    local.set(DRAFT_KEY, ui.input.value);
    autosize();
    updateSendButton();
  });
  ui.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      submit(false);
    }
  });
  ui.form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(true); });

  /** Enter or the button: sends the composer's text; the button with nothing typed is Stop. */
  function submit(viaButton) {
    const text = ui.input.value.trim();
    if (!text) { if (viaButton && busy()) stop(); return; }
    sendMessage(text);
    ui.input.value = "";
    local.remove(DRAFT_KEY);
    autosize();
    updateSendButton();
  }

  ui.newChat.addEventListener("click", newChat);
  ui.jump.addEventListener("click", scrollToBottom);
  ui.scroller.addEventListener("scroll", () => {
    const s = ui.scroller;
    if (s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM_PX) ui.jump.hidden = true;
  });
  ui.messages.addEventListener("click", (ev) => {
    const button = ev.target.closest(".copy-btn");
    if (button) copyCode(button);
  });

  function copyCode(button) {
    const code = button.closest(".code").querySelector("code").textContent;
    const api = navigator.clipboard && window.isSecureContext;
    (api ? navigator.clipboard.writeText(code) : Promise.reject()).catch(() => {
      const area = document.body.appendChild(el("textarea")); // plain http: the old way
      area.value = code;
      area.select();
      const copied = document.execCommand("copy");
      area.remove();
      if (!copied) throw new Error("copy failed");
    }).then(() => {
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    }, () => {});
  }

  // ---------------------------------------------------------------- markdown

  // Single quotes stay: every attribute this renderer writes is double-quoted.
  const escapeHtml = (s) =>
    s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

  /**
   * A small Markdown subset for assistant text. The whole input is HTML-escaped first; every
   * tag in the output is added here, and link targets are limited to http(s) and mailto.
   */
  function renderMarkdown(source) {
    const lines = escapeHtml(source.replace(/\r\n?/g, "\n").replace(/\u0000/g, "")).split("\n");
    return renderBlocks(lines);
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w#+.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const QUOTE = /^ {0,3}&gt; ?/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const SAFE_HREF = /^(https?:\/\/|mailto:)/i;

  function renderBlocks(lines) {
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = line.match(FENCE))) {
        const close = new RegExp(`^ {0,3}${m[1][0]}{${m[1].length},}\\s*$`);
        const code = [];
        for (i++; i < lines.length && !close.test(lines[i]); i++) code.push(lines[i]);
        const open = i >= lines.length; // still streaming: show what there is as an open block
        i++;
        const lang = m[2] ? `<span class="code-lang">${m[2]}</span>` : "<span></span>";
        out.push(`<div class="code${open ? " open" : ""}"><div class="code-head">${lang}` +
          `<button type="button" class="copy-btn">Copy</button></div><pre><code>${code.join("\n")}</code></pre></div>`);
      } else if ((m = line.match(HEADING))) {
        out.push(`<h${m[1].length}>${inline(m[2])}</h${m[1].length}>`);
        i++;
      } else if (RULE.test(line)) {
        out.push("<hr>");
        i++;
      } else if (QUOTE.test(line)) {
        const quoted = [];
        for (; i < lines.length && QUOTE.test(lines[i]); i++) quoted.push(lines[i].replace(QUOTE, ""));
        out.push(`<blockquote>${renderBlocks(quoted)}</blockquote>`);
      } else if (ITEM.test(line)) {
        const items = [];
        for (; i < lines.length; i++) {
          const l = lines[i];
          if (ITEM.test(l)) items.push(l);
          else if (l.trim() && /^\s+/.test(l) && items.length) items[items.length - 1] += ` ${l.trim()}`;
          else if (!l.trim() && i + 1 < lines.length && ITEM.test(lines[i + 1])) continue;
          else break;
        }
        out.push(renderList(items));
      } else {
        const para = [];
        for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) para.push(inline(lines[i].trim()));
        out.push(`<p>${para.join("<br>")}</p>`);
      }
    }
    return out.join("");
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line) || ITEM.test(line) || RULE.test(line);
  }

  /** Nested lists by indentation: an item indented past its predecessor opens a sub-list. */
  function renderList(items) {
    const parsed = items.map((l) => {
      const m = l.match(ITEM);
      const indent = m[1].replace(/\t/g, "    ").length;
      return { indent, ordered: /\d/.test(m[2]), start: parseInt(m[2], 10), text: m[3] };
    });
    let i = 0;
    const build = (indent) => {
      const first = parsed[i];
      const tag = first.ordered ? "ol" : "ul";
      const start = first.ordered && first.start !== 1 ? ` start="${first.start}"` : "";
      let html = `<${tag}${start}>`;
      // A sibling of the other kind (bullets after numbers) ends this list and starts its own.
      const belongs = (next) => next.indent > indent || (next.indent === indent && next.ordered === first.ordered);
      while (i < parsed.length && belongs(parsed[i])) {
        const item = parsed[i++];
        html += `<li>${inline(item.text)}`;
        while (i < parsed.length && parsed[i].indent > item.indent) html += build(parsed[i].indent);
        html += "</li>";
      }
      return `${html}</${tag}>`;
    };
    let html = "";
    while (i < parsed.length) html += build(parsed[i].indent);
    return html;
  }

  /** Inline spans on already-escaped text; code and links are set aside so nothing inside them changes. */
  function inline(text) {
    const saved = [];
    const keep = (html) => `\u0000${saved.push(html) - 1}\u0000`;
    let s = text.replace(/(`+)(.+?)\1/g, (_, __, code) => keep(`<code>${code}</code>`));
    s = s.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (all, label, href) =>
      SAFE_HREF.test(href) ? keep(link(href, emphasis(label))) : all);
    s = s.replace(/(^|[\s(]|&quot;)((?:https?:\/\/|mailto:)(?:(?!&quot;|&lt;|&gt;)\S)+)/g, (_, lead, url) => {
      const href = url.replace(/(?:[.,:;!?)'*_\]]|&quot;)+$/, "");
      return lead + keep(link(href, href)) + url.slice(href.length);
    });
    s = emphasis(s);
    return s.replace(/\u0000(\d+)\u0000/g, (_, n) => saved[Number(n)]);
  }

  function emphasis(s) {
    return s
      .replace(/\*\*(?=\S)(.+?)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|\W)__(?=\S)(.+?)__(?!\w)/g, "$1<strong>$2</strong>")
      .replace(/(^|[^*\w])\*(?=[^\s*])(.+?)\*(?!\*)/g, "$1<em>$2</em>")
      .replace(/(^|\W)_(?=[^\s_])(.+?)_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)(.+?)~~/g, "<del>$1</del>");
  }

  function link(href, label) {
    return `<a href="${href}" target="_blank" rel="noopener noreferrer">${label}</a>`;
  }

  // ---------------------------------------------------------------- start

  takeToken();
  updateSendButton();
  connect();
})();

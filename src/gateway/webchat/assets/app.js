/**
 * Ferry web chat: the page's behaviour (ES2020, no build step). markdown.js loads before it
 * and renders assistant text (`window.ferryMarkdown`: markdown-it, then DOMPurify).
 *
 * Speaks the gateway's WebSocket protocol (docs/gateway-protocol.md) on `/ws`: a `connect`
 * handshake with a client id kept in localStorage (each browser is a client of its own, and
 * the gateway answers with the session the page then follows), `chat.history` on every
 * (re)connect, `chat.send` / `chat.abort` from the composer, and `chat` / `agent` events
 * rendered as streaming bubbles with tool chips. Reconnects with backoff; unacknowledged
 * messages stay on screen and are re-sent with the same idempotency key, so the gateway never
 * runs one twice. The connection state is `#status[data-state]`: connecting, connected,
 * reconnecting (a banner says so) or unauthorized. A request to approve a command gets
 * Approve / Deny buttons that send `/approve ID` / `/deny ID` as the user would; `approval`
 * events and the history keep it current (how it ended replaces the buttons), so a reload
 * shows a pending request with working buttons and a settled one as settled. Files (uploads,
 * images and download links in messages) are media.js's (`window.ferryMedia`). A gateway with
 * several agents lists them in `hello-ok.agents`: the header then offers a picker, and the page
 * shows this browser's conversation with the agent picked (remembered in localStorage).
 */
"use strict";

(() => {
  /** Delays between reconnect attempts; the last one repeats. */
  const BACKOFF_MS = [1000, 2000, 5000, 10000];
  /** Within this many pixels of the bottom, new content keeps the view pinned to the bottom. */
  const NEAR_BOTTOM_PX = 96;
  /** How long a `health` probe of a quiet socket may take before the socket counts as dead. */
  const PROBE_MS = 10000;
  /** Messages `chat.history` brings back; the gateway's default (100) would cut a long chat short. */
  const HISTORY_LIMIT = 1000;
  /** Performance mark set once a `chat.history` answer is on screen (laid out, scrolled). */
  const HISTORY_MARK = "ferry:history-rendered";
  const CLIENT_ID_KEY = "ferry.webchat.clientId";
  const TOKEN_KEY = "ferry.webchat.token";
  const DRAFT_KEY = "ferry.webchat.draft";
  /** The agent picked last, by id; a gateway that no longer has it gets its default. */
  const AGENT_KEY = "ferry.webchat.agent";

  /** Assistant text as sanitized DOM nodes (markdown.js): one text, or many in one pass. */
  const { render: renderMarkdown, renderAll: renderMarkdownAll } = window.ferryMarkdown;
  /** Uploads from the composer, and files shown in messages (media.js). */
  const media = window.ferryMedia;

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("status"), statusText: document.querySelector("#status .status-text"),
    banner: $("banner"), bannerText: document.querySelector("#banner .banner-text"), retryNow: $("retry-now"),
    agentPicker: $("agent-picker"), agent: $("agent"),
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

  /**
   * The socket and what the handshake said. `sessionKey` is the conversation on screen: the
   * history, Stop and what is typed now name it, and events of any other session are ignored.
   */
  const conn = {
    ws: null, ready: false, sessionKey: null, attempt: 0, nextId: 1, retryTimer: 0,
    pending: new Map(), lastFrameAt: 0, tickMs: 30000, probing: false, authFailed: false,
  };
  /** Messages typed but not yet acknowledged, by idempotency key: re-sent after a reconnect. */
  const outbox = new Map();

  /**
   * The header's status and the banner under it. `connecting` until the first handshake,
   * `connected` while a socket is up, `reconnecting` from a lost socket (or a failed first
   * attempt) to the next handshake, `unauthorized` when the gateway refused the token.
   */
  const STATES = {
    connecting: { status: "Connecting…", banner: null },
    connected: { status: "Connected", banner: null },
    reconnecting: {
      status: "Reconnecting…",
      banner: "Connection to Ferry lost. Reconnecting… Messages you send now wait here and go out once it is back.",
    },
    unauthorized: {
      status: "Access token needed",
      banner: "This gateway needs an access token: open the page with ?token=<gateway.auth_token> in the address.",
    },
  };

  function setStatus(state) {
    ui.status.dataset.state = state;
    ui.statusText.textContent = STATES[state].status;
    ui.status.title = state === "connected" ? `Conversation ${conn.sessionKey}` : "";
    ui.banner.hidden = STATES[state].banner === null;
    ui.banner.dataset.state = state;
    ui.bannerText.textContent = STATES[state].banner || "";
    ui.retryNow.hidden = state !== "reconnecting";
    ui.newChat.disabled = state !== "connected";
    ui.agent.disabled = state !== "connected";
  }

  function connect() {
    clearTimeout(conn.retryTimer);
    if (conn.ws || conn.authFailed) return;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let ws;
    try { ws = new WebSocket(`${scheme}//${location.host}/ws`); } catch { onDisconnect(); return; }
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
      // The gateway decides which conversation this browser is (session.dm_scope), one per
      // agent; every event for another session is ignored.
      conn.sessionKey = offerAgents(hello);
      ui.status.dataset.session = conn.sessionKey;
      // Typed before the first connection: for the conversation the page opens with.
      for (const item of outbox.values()) if (!item.sessionKey) item.sessionKey = conn.sessionKey;
      if (hello.tickIntervalMs) conn.tickMs = hello.tickIntervalMs;
      const uploads = hello.features && hello.features.uploads;
      media.enable(uploads ? uploads.maxBytes : null);
      setStatus("connected");
      loadHistory();
    }, (err) => {
      if (err.code === "UNAUTHORIZED") conn.authFailed = true;
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
    for (const item of outbox.values()) setMeta(item.el, QUEUED);
    if (conn.authFailed) { setStatus("unauthorized"); return; }
    setStatus("reconnecting");
    scheduleReconnect();
  }

  function scheduleReconnect() {
    const delay = BACKOFF_MS[Math.min(conn.attempt, BACKOFF_MS.length - 1)];
    conn.attempt += 1;
    ui.status.title = `Next attempt in ${delay / 1000} s`;
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
      const p = frame.payload;
      // A command's answer is this page's own whatever session it names: the gateway labels
      // what it sends to this browser with the browser's first conversation.
      const ours = frame.event === "chat" && commands.has(p.runId);
      if (p.sessionKey && p.sessionKey !== conn.sessionKey && !ours) return;
      if (frame.event === "chat") onChat(p);
      else if (frame.event === "agent") onAgent(p);
      else if (frame.event === "approval") onApproval(p);
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
  const reconnectNow = () => { if (!conn.ws) { conn.attempt = 0; connect(); } };
  window.addEventListener("online", reconnectNow);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) reconnectNow(); });
  ui.retryNow.addEventListener("click", reconnectNow);

  // ---------------------------------------------------------------- history

  /**
   * Whether the page knows what the conversation holds: `chat.history` answered, or the view
   * was cleared for a new conversation. Until then the hero stays hidden, so it never flashes
   * over a history still on its way.
   */
  let historyKnown = false;

  function loadHistory() {
    const sessionKey = conn.sessionKey;
    request("chat.history", { sessionKey, limit: HISTORY_LIMIT }).then((payload) => {
      if (sessionKey !== conn.sessionKey) return; // another agent was picked meanwhile: its own is on the way
      const receivedAt = performance.now();
      clearMessages();
      const shown = (payload.messages || []).filter((m) => typeof m.text === "string" &&
        (m.role === "user" || m.role === "assistant" || (m.role === "approval" && validApproval(m.approval))));
      // A request to approve a command is Ferry's own message: without its emoji, as live.
      const sources = shown.filter((m) => m.role !== "user")
        .map((m) => m.role === "approval" ? m.text.replace(LEADING_EMOJI, "") : m.text);
      const answers = renderMarkdownAll(sources);
      // Built off-page and added in one go: one layout for the whole history.
      const list = document.createDocumentFragment();
      let answer = 0;
      for (const m of shown) {
        const restored = m.role === "user" ? bubble("user", "sent", m.text) : bubble("assistant", "final", answers[answer++]);
        if (m.role === "approval") setApproval(restored, latestApproval(m.approval));
        media.show(restored, m.files);
        restored.classList.add("restored");
        list.appendChild(restored);
      }
      for (const item of outbox.values()) if (item.sessionKey === sessionKey) list.appendChild(item.el);
      ui.messages.appendChild(list);
      historyKnown = true;
      updateEmpty();
      scrollToBottom(); // reads the layout, so the mark below comes after it
      performance.mark(HISTORY_MARK, { detail: { messages: shown.length } });
      performance.measure(`${HISTORY_MARK}:render`, { start: receivedAt, end: performance.now() });
      for (const item of outbox.values()) sendItem(item);
    }, () => {
      for (const item of outbox.values()) sendItem(item);
    });
  }

  function clearMessages() {
    runs.clear();
    undrawn.clear();
    typing = null;
    for (const node of [...ui.messages.children]) if (node !== ui.empty) node.remove();
    updateEmpty();
  }

  // ---------------------------------------------------------------- agents

  /**
   * This browser's conversation with `agent` (an entry of `hello-ok.agents`): as the gateway
   * names it, else `home` (`hello-ok.sessionKey`) with its agent part swapped. Keys are
   * `agent:<agent id>:<conversation>`, and the conversation part (this browser's own chat) is
   * the same whichever agent answers. `null` when neither says.
   */
  function sessionOf(agent, home) {
    if (typeof agent.sessionKey === "string" && agent.sessionKey) return agent.sessionKey;
    const parts = typeof home === "string" ? home.split(":") : [];
    if (parts.length < 3 || parts[0] !== "agent") return null;
    return ["agent", agent.id.toLowerCase(), ...parts.slice(2)].join(":");
  }

  /**
   * Fills the picker from `hello-ok.agents` and returns the session to show: the agent picked
   * last, else the one the gateway chose for this browser (`hello-ok.sessionKey`, the default
   * agent's). With fewer than two agents (or a gateway that lists none) the picker stays
   * hidden and the page shows the gateway's choice, as it always did. Names are set as text:
   * they come from the operator's config, never as HTML.
   */
  function offerAgents(hello) {
    const agents = [];
    for (const a of Array.isArray(hello.agents) ? hello.agents : []) {
      if (!a || typeof a.id !== "string" || a.id === "") continue;
      const name = typeof a.name === "string" && a.name ? a.name : a.id;
      const sessionKey = sessionOf(a, hello.sessionKey);
      if (sessionKey !== null) agents.push({ id: a.id, name, sessionKey });
    }
    ui.agentPicker.hidden = agents.length < 2;
    if (agents.length < 2) {
      ui.agent.replaceChildren();
      return hello.sessionKey;
    }
    const home = agents.find((a) => a.sessionKey === hello.sessionKey) || agents[0];
    const picked = agents.find((a) => a.id === local.get(AGENT_KEY)) || home;
    ui.agent.replaceChildren(...agents.map((a) => {
      const option = el("option", undefined, a.name);
      option.value = a.id;
      option.dataset.session = a.sessionKey;
      return option;
    }));
    ui.agent.value = picked.id;
    return picked.sessionKey;
  }

  /** Another agent picked: its conversation replaces the one on screen, and it is remembered. */
  ui.agent.addEventListener("change", () => {
    const option = ui.agent.selectedOptions[0];
    if (!option) return;
    local.set(AGENT_KEY, option.value);
    if (option.dataset.session === conn.sessionKey) return;
    conn.sessionKey = option.dataset.session;
    ui.status.dataset.session = conn.sessionKey;
    ui.status.title = `Conversation ${conn.sessionKey}`;
    historyKnown = false; // no hero until its history says it is empty
    mutate(clearMessages);
    if (conn.ready) loadHistory();
  });

  // ---------------------------------------------------------------- bubbles

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** The hero shows only over a conversation known to be empty. */
  function updateEmpty() {
    ui.empty.hidden = !historyKnown || ui.messages.querySelector(".msg") !== null;
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

  /**
   * A bubble, not yet on the page. `content` is the user's text, shown as typed, or the
   * assistant's rendered Markdown (`renderMarkdown`); a "typing" assistant bubble shows dots.
   */
  function bubble(role, state, content) {
    const msg = el("div", `msg ${role}`);
    msg.dataset.state = state;
    const main = el("div", "msg-main");
    if (role === "assistant") main.appendChild(el("div", "tools"));
    const body = el("div", "msg-body", role === "user" ? content : undefined);
    main.append(body, el("div", "msg-meta"));
    if (role === "assistant") msg.appendChild(el("div", "avatar", "F"));
    msg.appendChild(main);
    if (role === "assistant" && state === "typing") body.innerHTML = DOTS;
    else if (role === "assistant" && content) body.appendChild(content);
    return msg;
  }

  function addBubble(role, state, content) {
    return ui.messages.appendChild(bubble(role, state, content));
  }

  function setBody(msg, text) {
    msg.querySelector(".msg-body").replaceChildren(renderMarkdown(text || ""));
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

  /**
   * Ferry's notices open with an emoji (a command's answer: "🆕 Started a new conversation.").
   * Where no emoji font is installed that is a box, so the page drops it and draws its own mark.
   */
  const LEADING_EMOJI = /^(?:[\p{Extended_Pictographic}\p{Regional_Indicator}][\uFE0F\u200D]*)+\s*/u;

  /**
   * A line from Ferry itself, such as a command's answer. Not a message of the conversation:
   * the hero may show above it.
   */
  function addNotice(text) {
    const notice = el("div", "notice");
    notice.append(el("span", "notice-mark"), el("span", "notice-text", text.replace(LEADING_EMOJI, "")));
    return ui.messages.appendChild(notice);
  }

  // ---------------------------------------------------------------- runs

  /**
   * One entry per runId: `{el, live, text, interrupted, chips}`. `el` is the bubble the run
   * shows its output in, `live` while it may still stream, `interrupted` once a request to
   * approve a command it asked for landed under that bubble (see `resume`), `chips` its tool
   * chips by call id.
   */
  const runs = new Map();
  /** A "thinking" bubble shown from a send until the reply's first event. */
  let typing = null;
  /**
   * Idempotency keys of commands this page sent (`/new`): their answers are notices, shown in
   * whichever conversation is on screen.
   */
  const commands = new Set();
  /**
   * Runs whose latest delta is not drawn yet. Deltas carry the whole text so far; a burst of
   * them costs one Markdown render per bubble per animation frame.
   */
  const undrawn = new Set();

  function setTyping(on) {
    if (on && !typing) typing = mutate(() => addBubble("assistant", "typing"));
    else if (!on && typing) mutate(() => { typing.remove(); typing = null; });
  }

  function runFor(runId) {
    let run = runs.get(runId);
    if (!run) {
      setTyping(false);
      run = { el: mutate(() => addBubble("assistant", "typing")), live: true, text: "", interrupted: false, chips: new Map() };
      run.el.dataset.run = runId;
      runs.set(runId, run);
    }
    return run;
  }

  /**
   * A request to approve a command comes from a tool the run `runId` called: after what the
   * run has shown, and before what it shows next. The run's next output goes under it
   * (`resume`).
   */
  function interruptRun(runId) {
    const run = typeof runId === "string" ? runs.get(runId) : undefined;
    if (run && run.live) run.interrupted = true;
  }

  /**
   * Before an interrupted run shows more: a bubble with no text yet (dots, tool chips) moves to
   * the bottom; one with text stays where it is, settled, and the run goes on in a new bubble
   * at the bottom. Either way the page reads in the order things happened. Call inside `mutate`.
   */
  function resume(run) {
    if (!run.interrupted) return;
    run.interrupted = false;
    if (undrawn.delete(run)) setBody(run.el, run.text);
    if (run.el.querySelector(".msg-body").textContent.trim() === "") {
      ui.messages.appendChild(run.el);
      return;
    }
    run.el.dataset.state = "final";
    const next = bubble("assistant", "typing");
    next.dataset.run = run.el.dataset.run;
    run.el = ui.messages.appendChild(next);
    run.text = "";
  }

  function drawSoon(run, text) {
    run.text = text;
    if (undrawn.size === 0) requestAnimationFrame(drawDeltas);
    undrawn.add(run);
  }

  function drawDeltas() {
    const due = [...undrawn];
    undrawn.clear();
    mutate(() => {
      for (const run of due) {
        run.el.dataset.state = "streaming";
        setBody(run.el, run.text);
      }
    });
  }

  function dropRun(runId) {
    const run = runs.get(runId);
    if (!run) return;
    undrawn.delete(run);
    run.el.remove();
    runs.delete(runId);
    mutate(() => {});
  }

  /** Settles a bubble; a delta still waiting for its frame is drawn first. */
  function finishRun(run, state, note) {
    if (undrawn.delete(run)) setBody(run.el, run.text);
    run.live = false;
    run.el.dataset.state = state;
    if (run.el.querySelector(".dots")) run.el.querySelector(".msg-body").textContent = "";
    if (note) setMeta(run.el, note);
    updateSendButton();
  }

  /**
   * The model's reasoning (`/reasoning on|stream`) as a collapsed block above the answer:
   * there for whoever wants it, out of the way of whoever does not. Plain text, never HTML.
   */
  function setReasoning(msg, reasoning) {
    let block = msg.querySelector("details.reasoning");
    if (!block) {
      block = el("details", "reasoning");
      block.append(el("summary", undefined, "Reasoning"), el("div", "reasoning-text"));
      msg.querySelector(".msg-main").insertBefore(block, msg.querySelector(".msg-body"));
    }
    block.querySelector(".reasoning-text").textContent = reasoning;
  }

  function onChat(p) {
    const text = p.message && typeof p.message.text === "string" ? p.message.text : null;
    const reasoning = typeof p.reasoning === "string" && p.reasoning ? p.reasoning : null;
    if (p.state === "delta") {
      const run = runFor(p.runId);
      if (!run.live) return;
      if (reasoning !== null || text !== null) mutate(() => resume(run));
      if (reasoning !== null) mutate(() => setReasoning(run.el, reasoning));
      if (text === null) return;
      drawSoon(run, text);
    } else if (p.state === "final") {
      setTyping(false);
      // A command's answer arrives as a final of its own, with no run before it.
      if (commands.delete(p.runId) && !runs.has(p.runId)) {
        if (text !== null) mutate(() => addNotice(text));
        return;
      }
      const files = media.valid(p.files);
      if (text === null && files.length === 0) { dropRun(p.runId); return; }
      // No run started it: a message Ferry sent to this chat (a tool's, such as a request to
      // approve a command), not a reply the page saw stream.
      const sentToChat = !runs.has(p.runId);
      const approval = sentToChat && text !== null && validApproval(p.approval) ? p.approval : null;
      if (approval) interruptRun(approval.runId);
      const run = runFor(p.runId);
      // Lines for the user that are not the answer ("this model cannot think"): after it.
      const notices = Array.isArray(p.notices) ? p.notices.filter((n) => typeof n === "string" && n) : [];
      mutate(() => {
        resume(run);
        undrawn.delete(run);
        if (reasoning !== null) setReasoning(run.el, reasoning);
        // Ferry's own message opens with an emoji, which may draw as a box (see addNotice).
        setBody(run.el, approval ? text.replace(LEADING_EMOJI, "") : text || "");
        media.show(run.el, files);
        finishRun(run, "final");
        if (approval) setApproval(run.el, latestApproval(approval));
        for (const notice of notices) addNotice(notice);
      });
    } else if (p.state === "aborted") {
      setTyping(false);
      const run = runFor(p.runId);
      mutate(() => {
        resume(run);
        if (text !== null) { undrawn.delete(run); setBody(run.el, text); }
        finishRun(run, "stopped", "Stopped");
      });
    } else if (p.state === "error") {
      setTyping(false);
      const run = runFor(p.runId);
      mutate(() => { resume(run); finishRun(run, "error", p.errorMessage || "Something went wrong."); });
    }
  }

  /** What a tool chip's mark means, for its tooltip; the mark itself is drawn by CSS. */
  const TOOL_STATES = { running: "running", ok: "done", error: "failed" };

  function onAgent(p) {
    const data = p.data || {};
    if (p.stream === "lifecycle" && data.phase === "start") {
      runFor(p.runId);
    } else if (p.stream === "lifecycle" && (data.phase === "end" || data.phase === "error")) {
      // The chat `final` normally settles the bubble; this only clears dots that would stay.
      const run = runs.get(p.runId);
      if (!run || !run.live || !run.el.querySelector(".dots")) return;
      if (run.el.querySelector(".chip")) mutate(() => finishRun(run, "final"));
      else dropRun(p.runId);
    } else if (p.stream === "tool" && (data.phase === "start" || data.phase === "result")) {
      const run = runFor(p.runId);
      const id = data.toolCallId || data.name;
      const name = data.name || "tool";
      const state = data.phase === "start" ? "running" : data.isError ? "error" : "ok";
      mutate(() => {
        // A result updates its call's chip where it is, even in a bubble the run has left.
        let chip = run.chips.get(id);
        if (!chip) {
          resume(run);
          chip = run.el.querySelector(".tools").appendChild(el("span", "chip"));
          run.chips.set(id, chip);
        }
        Object.assign(chip.dataset, { call: id, state });
        chip.textContent = name;
        chip.title = `${name}: ${TOOL_STATES[state]}`;
      });
    }
  }

  // ---------------------------------------------------------------- approvals

  /** What the gateway says of a request to approve a command, checked: `{id, state, by?}` with string values. */
  function validApproval(a) {
    return Boolean(a) && typeof a.id === "string" && a.id !== "" && typeof a.state === "string" &&
      (a.by === undefined || typeof a.by === "string");
  }

  /** Who answered a request: this browser is "you" (the web chat answers as its client id). */
  function answeredBy(by) {
    return by && by === clientId() ? "you" : by || "someone";
  }

  /** How a settled request ended, in words; `null` while it waits. */
  function approvalOutcome(a) {
    switch (a.state) {
      case "pending": return null;
      case "approved": return `Approved by ${answeredBy(a.by)}.`;
      case "denied": return `Denied by ${answeredBy(a.by)}: the command did not run.`;
      case "timedOut": return "Nobody answered in time: the command did not run.";
      case "withdrawn": return "No longer waiting (the reply was stopped): the command did not run.";
      default: return "No longer waiting.";
    }
  }

  /**
   * The Approve / Deny bar under `msg`, the request to approve command `a.id`, as `a.state`
   * says: buttons while it waits, each sending its command as if typed (then both are disabled:
   * a request is answered once); once settled, how it ended instead, never a button. The
   * labels and the outcome are fixed text; the request itself is rendered like any message.
   */
  function setApproval(msg, a) {
    msg.dataset.approval = a.id;
    let bar = msg.querySelector(".approval");
    if (!bar) {
      bar = el("div", "approval");
      bar.setAttribute("role", "group");
      bar.setAttribute("aria-label", "Approve or deny this command");
      msg.querySelector(".msg-main").insertBefore(bar, msg.querySelector(".msg-meta"));
    }
    bar.dataset.state = a.state;
    const outcome = approvalOutcome(a);
    if (outcome !== null) {
      bar.replaceChildren(el("span", "approval-outcome", outcome));
      return;
    }
    if (bar.querySelector("button")) return; // already offered, maybe already clicked
    for (const [verb, label] of [["approve", "Approve"], ["deny", "Deny"]]) {
      const button = el("button", `approval-btn ${verb}`, label);
      button.type = "button";
      button.addEventListener("click", () => {
        for (const other of bar.querySelectorAll("button")) other.disabled = true;
        button.classList.add("chosen");
        sendMessage(`/${verb} ${a.id}`);
      });
      bar.appendChild(button);
    }
  }

  /**
   * Requests this page heard settle, by id: a history (or a message) read just before a request
   * settled may still call it pending when it arrives after the `approval` event that settled it.
   */
  const settledApprovals = new Map();

  /** `a`, unless the page already heard that it settled. */
  function latestApproval(a) {
    return (a.state === "pending" && settledApprovals.get(a.id)) || a;
  }

  /** An `approval` event: a request was answered, timed out or withdrawn. */
  function onApproval(p) {
    if (!validApproval(p) || p.state === "pending") return;
    settledApprovals.set(p.id, p);
    const msg = [...ui.messages.querySelectorAll(".msg[data-approval]")].find((m) => m.dataset.approval === p.id);
    if (msg) mutate(() => setApproval(msg, p));
  }

  // ---------------------------------------------------------------- sending

  /** The note under a message that waits for the connection. */
  const QUEUED = "Waiting for the connection; sends once it is back.";
  /** Commands that start a new conversation: the page clears itself for them. */
  const NEW_CONVERSATION = /^\/(new|reset)$/i;

  function busy() {
    return typing !== null || [...runs.values()].some((r) => r.live);
  }

  function updateSendButton() {
    const files = media.state();
    const empty = ui.input.value.trim() === "" && files.count === 0;
    const stop = busy() && empty;
    ui.send.classList.toggle("stop", stop);
    ui.send.setAttribute("aria-label", stop ? "Stop" : "Send");
    ui.send.title = stop ? "Stop the reply" : files.uploading ? "Uploading…" : "Send (Enter)";
    ui.send.disabled = !stop && (empty || files.uploading);
  }

  /** Sends `text` with `files` (uploaded, from `media.take()`); either may be empty. */
  function sendMessage(text, files = []) {
    // `sessionKey`: the conversation it was typed in (set at the first handshake if none yet).
    const item = { key: uuid(), text, files, el: null, sessionKey: conn.sessionKey };
    if (text.startsWith("/") && files.length === 0) commands.add(item.key);
    mutate(() => {
      item.el = addBubble("user", "pending", text);
      media.show(item.el, files);
    });
    scrollToBottom();
    outbox.set(item.key, item);
    sendItem(item);
  }

  function sendItem(item) {
    item.el.dataset.state = "pending";
    if (!conn.ready) { setMeta(item.el, QUEUED); return; }
    if (item.inFlight) return;
    item.inFlight = true;
    setMeta(item.el, "");
    if (item.sessionKey === conn.sessionKey && !runs.has(item.key)) setTyping(true);
    const params = { message: item.text, idempotencyKey: item.key, sessionKey: item.sessionKey };
    if (item.files.length) params.attachments = item.files.map((f) => ({ id: f.id, name: f.name }));
    request("chat.send", params).then(() => {
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
    request("chat.abort", { sessionKey: conn.sessionKey }).catch(() => {});
    setTyping(false);
  }

  /** Clears the view (the hero shows again) and asks the gateway for a new conversation. */
  function newChat(command = "/new") {
    if (!conn.ready) return;
    const key = uuid();
    commands.add(key);
    mutate(() => {
      clearMessages();
      historyKnown = true; // a new conversation is empty
      for (const item of outbox.values()) if (item.sessionKey === conn.sessionKey) ui.messages.appendChild(item.el);
    });
    request("chat.send", { message: command, idempotencyKey: key, sessionKey: conn.sessionKey }).catch((err) => {
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
    const files = media.state();
    if (files.uploading) return; // sent once the uploads are done
    if (!text && files.count === 0) { if (viaButton && busy()) stop(); return; }
    if (NEW_CONVERSATION.test(text) && !conn.ready) return; // kept in the composer until connected
    if (NEW_CONVERSATION.test(text) && files.count === 0) newChat(text);
    else sendMessage(text, media.take());
    ui.input.value = "";
    local.remove(DRAFT_KEY);
    autosize();
    updateSendButton();
  }

  ui.newChat.addEventListener("click", () => newChat());
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

  // ---------------------------------------------------------------- start

  takeToken();
  media.setup({ token: () => session.get(TOKEN_KEY), changed: updateSendButton });
  updateSendButton();
  setStatus("connecting");
  connect();
})();

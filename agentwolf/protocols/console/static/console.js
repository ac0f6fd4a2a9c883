// AgentWolf console: sends forms with fetch, refreshes lists, renders a session's live events.
// No framework, no build step: this file is served as it is.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);

function notice(text, isError) {
  const box = $("#notice");
  if (!box) return;
  box.textContent = text;
  box.classList.toggle("error", Boolean(isError));
}

async function post(url, data) {
  const answer = await fetch(url, {
    method: "POST",
    headers: {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"},
    body: new URLSearchParams(data),
    credentials: "same-origin",
  });
  let body = {};
  try { body = await answer.json(); } catch (e) { /* not JSON */ }
  if (!answer.ok) throw new Error((body.error && body.error.message) || answer.statusText);
  return body;
}

// Forms marked data-act post with fetch and keep the page (a live stream stays open).
document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!form.matches("form[data-act], form[data-new-session]")) return;
  event.preventDefault();
  const button = event.submitter;
  const url = (button && button.getAttribute("formaction")) || form.getAttribute("action");
  const data = new FormData(form);
  if (button && button.name) data.set(button.name, button.value);
  form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try {
    const answer = await post(url, data);
    if (answer.url) { window.location.assign(answer.url); return; }
    if (form.closest("[data-reload]")) { window.location.reload(); return; }
    notice(answer.message || "done");
    const text = form.querySelector("textarea");
    if (text) text.value = "";
    const approval = form.closest(".approval");
    if (approval) approval.remove();
  } catch (error) {
    notice(error.message, true);
  } finally {
    form.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
});

// Regions marked data-refresh reload from data-src (HTML) unless focus is inside them.
function refreshing(region) {
  const every = Number(region.dataset.refresh);
  const tick = async () => {
    if (!region.contains(document.activeElement) || document.activeElement === document.body) {
      try {
        const answer = await fetch(region.dataset.src, {credentials: "same-origin"});
        if (answer.ok) {
          const html = await answer.text();
          if (html !== region.dataset.html) {
            region.dataset.html = html;
            region.innerHTML = html;
            loadFigures(region);
          }
        }
      } catch (e) { /* the next tick tries again */ }
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

// The session list's figures (turns, tokens, USD, badges) arrive after the page.
async function loadFigures(root) {
  const rows = [...root.querySelectorAll("tr[data-session]")];
  if (!rows.length) return;
  const query = new URLSearchParams(rows.map((r) => ["id", r.dataset.session]));
  let found;
  try {
    const answer = await fetch(`${prefix()}/figures?${query}`, {credentials: "same-origin"});
    found = await answer.json();
  } catch (e) { return; }
  for (const row of rows) {
    const f = found[row.dataset.session] || {};
    const cell = (name) => row.querySelector(`[data-fig="${name}"]`);
    cell("turns").textContent = f.turns ?? "unknown";
    cell("tokens").textContent = f.tokens ?? "unknown";
    cell("cost_usd").textContent = f.cost_usd == null ? "unknown" : f.cost_usd.toFixed(4);
    if (f.config_version != null) cell("config_version").textContent = ` v${f.config_version}`;
    const badges = cell("badges");
    badges.textContent = "";
    if (f.approvals) badges.append(badge(`${f.approvals} approval${f.approvals > 1 ? "s" : ""}`, "waiting"));
    if (f.rate_limited) badges.append(badge("rate-limited", "limited"));
  }
}

function badge(text, kind) {
  const span = document.createElement("span");
  span.className = `badge ${kind}`;
  span.textContent = text;
  return span;
}

function prefix() {
  return $('link[rel="stylesheet"]').getAttribute("href").replace(/\/static\/console\.css$/, "");
}

// A session's conversation, from its events.
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
}

const LONG = 600; // characters past which tool arguments and results start collapsed

function collapsible(label, text) {
  const box = el("details", "long");
  box.append(el("summary", null, label), el("pre", null, text));
  box.open = text.length <= LONG;
  return box;
}

class SessionView {
  constructor(root) {
    this.root = root;
    this.log = $("#conversation");
    this.timeline = $("#timeline");
    this.steps = new Map(); // "turn/step" -> {node, attempt, text}
    this.tools = new Map(); // call id -> card
    this.turns = new Map(); // turn id -> {item, started}
    this.deltas = 0; // text deltas shown (tests and benches read it)
    this.connect();
  }

  connect() {
    this.source = new EventSource(this.root.dataset.events);
    this.source.onopen = () => { this.open = true; };
    this.source.onmessage = (message) => this.show(JSON.parse(message.data));
    this.source.addEventListener("end", () => this.source.close());
  }

  add(node) {
    const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 40;
    this.log.append(node);
    if (atBottom) this.log.scrollTop = this.log.scrollHeight;
    return node;
  }

  step(event) {
    const key = `${event.turn_id}/${event.step}`;
    let step = this.steps.get(key);
    if (!step) {
      const node = this.add(el("div", "msg assistant"));
      node.append(el("span", "by", "agent"));
      const thinking = el("details", "thinking");
      thinking.append(el("summary", null, "thinking"), el("pre"));
      thinking.hidden = true;
      const body = el("div", "text");
      node.append(thinking, body);
      step = {node, body, thinking, attempt: null, text: "", thought: "", done: false};
      this.steps.set(key, step);
    }
    return step;
  }

  delta(event, field) {
    const step = this.step(event);
    if (step.done) return;
    if (event.attempt != null && step.attempt !== event.attempt) {
      step.attempt = event.attempt; step.text = ""; step.thought = "";
    }
    const have = step[field];
    const index = event.index ?? have.length;
    if (index + event.text.length <= have.length) return; // seen (a reconnect starts the step again)
    step[field] = have.slice(0, index) + event.text;
    this.deltas += 1;
    if (field === "text") step.body.textContent = step.text;
    else { step.thinking.hidden = false; step.thinking.querySelector("pre").textContent = step.thought; }
  }

  show(e) {
    switch (e.kind) {
      case "turn_started": {
        this.add(el("div", "msg user")).append(el("span", "by", "you"), el("div", "text", e.text || ""));
        const item = el("li", "turn running");
        item.append(el("strong", null, e.turn_id), el("span", "outcome", " running"));
        this.timeline.append(item);
        this.turns.set(e.turn_id, {item, started: Date.parse(e.at)});
        this.state("running");
        break;
      }
      case "text_delta": this.delta(e, "text"); break;
      case "thinking_delta": this.delta(e, "thought"); break;
      case "attempt_superseded": {
        const step = this.steps.get(`${e.turn_id}/${e.step}`);
        if (step && !step.done) { step.text = ""; step.thought = ""; step.body.textContent = ""; }
        break;
      }
      case "model_text": {
        const step = this.step(e);
        step.done = true;
        step.body.textContent = e.text || "";
        break;
      }
      case "tool_call_started": {
        const card = this.add(el("div", "tool"));
        card.append(el("span", "by", `tool ${e.tool}`));
        card.append(collapsible("arguments", JSON.stringify(e.args || {}, null, 1)));
        const bar = el("progress"); bar.hidden = true; bar.setAttribute("aria-label", `${e.tool} progress`);
        card.append(bar, el("span", "outcome", "running"));
        this.tools.set(e.call_id, card);
        break;
      }
      case "tool_progress": {
        const card = this.tools.get(e.call_id);
        if (!card) break;
        const bar = card.querySelector("progress");
        bar.hidden = false;
        if (e.total) { bar.max = e.total; bar.value = e.progress || 0; }
        break;
      }
      case "tool_call_finished": {
        const card = this.tools.get(e.call_id) || this.add(el("div", "tool"));
        card.querySelector("progress")?.remove();
        const outcome = card.querySelector(".outcome") || card.appendChild(el("span", "outcome"));
        outcome.textContent = `${e.outcome || "done"}${e.duration_ms != null ? ` in ${e.duration_ms} ms` : ""}`;
        if (e.text) card.append(collapsible("result", e.text));
        break;
      }
      case "approval_requested": this.approval(e); this.state("waiting_approval"); break;
      case "approval_resolved": {
        $(`.approval[data-call="${CSS.escape(e.call_id || "")}"]`)?.remove();
        if (!$("#approval-list .approval")) $("#approvals").hidden = true;
        this.note(`${e.tool || "tool call"}: ${e.outcome || e.text || "answered"}`);
        break;
      }
      case "steer_applied":
        this.add(el("div", "msg user steer")).append(el("span", "by", "you (steer)"), el("div", "text", e.text || ""));
        break;
      case "turn_finished": {
        const turn = this.turns.get(e.turn_id);
        if (turn) {
          turn.item.className = `turn ${e.outcome || ""}`;
          const seconds = ((Date.parse(e.at) - turn.started) / 1000).toFixed(1);
          const u = e.usage || {};
          const cost = u.cost_usd == null ? "USD unknown" : `$${u.cost_usd.toFixed(4)}`;
          turn.item.querySelector(".outcome").textContent =
            ` ${e.outcome} · ${seconds} s · ${(u.input_tokens || 0) + (u.output_tokens || 0)} tokens · ${cost}`;
        }
        this.state("idle");
        this.count(e.usage);
        break;
      }
      case "interrupted": case "error": case "limit_reached": case "limit_warning":
      case "context_compacted": case "compiled": case "rate_limited":
        this.note(`${e.kind.replace(/_/g, " ")}${e.text ? `: ${e.text}` : ""}`);
        break;
      case "session_closed": this.state("done"); this.note("session closed"); break;
      default: break;
    }
  }

  approval(e) {
    if ($(`.approval[data-call="${CSS.escape(e.call_id || "")}"]`)) return;
    const base = this.root.dataset.actions;
    const article = el("article", "approval");
    article.dataset.call = e.call_id;
    article.setAttribute("aria-label", `Approval for ${e.tool}`);
    const head = el("p");
    head.append(el("strong", null, e.tool), el("span", "muted", ` call ${e.call_id}`));
    const form = el("form", "answer");
    form.method = "post"; form.action = `${base}/approve`; form.dataset.act = "";
    const id = el("input"); id.type = "hidden"; id.name = "call_id"; id.value = e.call_id;
    const approve = el("button", null, "Approve"); approve.type = "submit";
    const always = el("button", null, "Approve always"); always.type = "submit"; always.name = "always"; always.value = "1";
    const label = el("label", null, "Reason to deny"); label.htmlFor = `reason-${e.call_id}`;
    const reason = el("input"); reason.id = label.htmlFor; reason.name = "reason";
    const deny = el("button", "warn", "Deny"); deny.type = "submit"; deny.setAttribute("formaction", `${base}/deny`);
    form.append(id, approve, always, label, reason, deny);
    article.append(head, el("pre", "args", JSON.stringify(e.args || {}, null, 1)), form);
    $("#approval-list").append(article);
    $("#approvals").hidden = false;
  }

  note(text) { this.add(el("p", "note", text)); }

  state(name) {
    const badgeNode = $("#state");
    badgeNode.className = `badge state-${name}`;
    badgeNode.textContent = name.replace(/_/g, " ");
  }

  count(usage) {
    // The page came with the session's figures; a replayed stream may hold fewer turns than it did.
    this.seen = this.seen || {turns: 0, tokens: 0, cost: 0};
    const u = usage || {};
    this.seen.turns += 1;
    this.seen.tokens += (u.input_tokens || 0) + (u.output_tokens || 0);
    this.seen.cost += u.cost_usd || 0;
    const raise = (id, value, show) => {
      const node = $(id);
      if (node.dataset.start == null) node.dataset.start = node.textContent;
      const start = Number(node.dataset.start);
      if (!Number.isNaN(start) && value > start) node.textContent = show(value);
    };
    raise("#turns", this.seen.turns, String);
    raise("#tokens", this.seen.tokens, String);
    if (u.cost_usd != null) raise("#cost", this.seen.cost, (v) => v.toFixed(4));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh]").forEach(refreshing);
  loadFigures(document);
  const session = $(".session[data-events]");
  if (session) window.wolfSession = new SessionView(session);
});

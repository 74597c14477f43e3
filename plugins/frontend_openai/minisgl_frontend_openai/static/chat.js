// The chat view: a conversation streamed from /v1/chat/completions, with a stop button.
"use strict";
(function () {
  const M = (window.minisgl = window.minisgl || {});
  const $ = (id) => document.getElementById(id);
  const history = []; // {role, content, tool_calls?} sent with every request
  let controller = null;

  function bubble(role, text) {
    $("empty").hidden = true;
    const root = document.createElement("div");
    root.className = "msg " + role;
    const content = document.createElement("div");
    content.className = "content";
    content.textContent = text;
    const meta = document.createElement("div");
    meta.className = "meta";
    root.append(content, meta);
    $("messages").append(root);
    scroll();
    return { root, content, meta };
  }

  function scroll() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  function parseField(id, what, check) {
    const raw = $(id).value.trim();
    if (!raw) return undefined;
    let value;
    try { value = JSON.parse(raw); } catch (e) { throw new Error(what + " is not valid JSON: " + e.message); }
    if (!check(value)) throw new Error(what + " has the wrong shape");
    return value;
  }

  function number(id) {
    const raw = $(id).value.trim();
    return raw === "" ? undefined : Number(raw);
  }

  function requestBody() {
    const messages = [];
    const system = $("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push(...history);
    const body = {
      messages, stream: true, stream_options: { include_usage: true },
      temperature: number("temperature"), top_p: number("top_p"), max_tokens: number("max_tokens"),
    };
    if (M.model) body.model = M.model;
    const schema = parseField("schema", "The JSON schema", (v) => v && typeof v === "object");
    if (schema) body.response_format = { type: "json_schema", json_schema: { name: "answer", schema } };
    const tools = parseField("tools", "Tools", Array.isArray);
    if (tools) body.tools = tools;
    const extra = parseField("extra", "Extra fields", (v) => v && typeof v === "object" && !Array.isArray(v));
    if (extra) Object.assign(body, extra);
    return body;
  }

  function busy(on) {
    $("send").hidden = on;
    $("stop").hidden = !on;
  }

  async function send(text) {
    history.push({ role: "user", content: text });
    bubble("user", text);
    const view = bubble("assistant", "");
    let body;
    try {
      body = requestBody();
    } catch (e) {
      history.pop();
      view.root.dataset.state = "error";
      view.content.textContent = e.message;
      return;
    }
    view.root.dataset.state = "streaming";
    controller = new AbortController();
    busy(true);
    const started = performance.now();
    let first = null, text_ = "", usage = null, finish = null, chunks = 0;
    const calls = [];
    let state = "done", error = null;
    try {
      const response = await fetch("/v1/chat/completions", {
        method: "POST", headers: M.headers(true), body: JSON.stringify(body),
        signal: controller.signal,
      });
      await M.check(response);
      for await (const event of M.readSSE(response)) {
        if (event.error) throw new Error(event.error.message || "the stream failed");
        if (event.usage) usage = event.usage;
        for (const choice of event.choices || []) {
          const delta = choice.delta || {};
          if (delta.content) {
            if (first === null) first = performance.now();
            text_ += delta.content;
            chunks += 1;
            view.content.textContent = text_;
            scroll();
          }
          for (const call of delta.tool_calls || []) {
            if (first === null) first = performance.now();
            const slot = (calls[call.index || 0] = calls[call.index || 0] ||
              { id: call.id, type: "function", function: { name: "", arguments: "" } });
            if (call.id) slot.id = call.id;
            if (call.function && call.function.name) slot.function.name += call.function.name;
            if (call.function && call.function.arguments) slot.function.arguments += call.function.arguments;
            view.content.textContent = text_ + (text_ ? "\n" : "") + renderCalls(calls);
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    } catch (e) {
      // after Stop, whatever the stream then fails with is the stop: Chrome may end a body
      // read that an abort cut short with a network error instead of an AbortError
      if (e.name === "AbortError" || controller.signal.aborted) state = "stopped";
      else { state = "error"; error = e.message; }
    }
    const ended = performance.now();
    controller = null;
    busy(false);
    if (state === "error") {
      view.content.textContent = text_ + (text_ ? "\n\n" : "") + "Error: " + error;
    }
    view.root.dataset.state = state;
    view.meta.textContent = meta(state, finish, usage, chunks, started, first, ended);
    if (text_ || calls.length) {
      const message = { role: "assistant", content: text_ };
      if (calls.length) message.tool_calls = calls.filter(Boolean);
      history.push(message);
    } else if (state !== "done") {
      history.pop(); // nothing came back: the question is not part of the conversation
    }
  }

  function renderCalls(calls) {
    return calls.filter(Boolean)
      .map((c) => "\u2192 " + c.function.name + "(" + c.function.arguments + ")").join("\n");
  }

  function meta(state, finish, usage, chunks, started, first, ended) {
    const parts = [];
    const tokens = usage ? usage.completion_tokens : chunks;
    parts.push(usage ? tokens + " tokens" : "\u2265" + tokens + " tokens");
    if (first !== null) {
      parts.push("TTFT " + Math.round(first - started) + " ms");
      const decode = (ended - first) / 1000;
      if (tokens > 1 && decode > 0) parts.push(((tokens - 1) / decode).toFixed(1) + " tokens/s");
    }
    if (state === "stopped") parts.push("stopped");
    else if (finish) parts.push("finish: " + finish);
    return parts.join(" \u00b7 ");
  }

  M.initChat = function () {
    $("composer").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("prompt").value.trim();
      if (!text || controller) return;
      $("prompt").value = "";
      send(text);
    });
    $("prompt").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $("composer").requestSubmit();
      } else if (ev.key === "Escape" && controller) {
        controller.abort();
      }
    });
    $("stop").addEventListener("click", () => { if (controller) controller.abort(); });
    $("clear").addEventListener("click", () => {
      if (controller) controller.abort();
      history.length = 0;
      for (const el of [...$("messages").querySelectorAll(".msg")]) el.remove();
      $("empty").hidden = false;
    });
  };
})();

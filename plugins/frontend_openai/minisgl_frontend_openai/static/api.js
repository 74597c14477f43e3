// The API key, authenticated requests and the SSE reader every other script uses.
"use strict";
(function () {
  const M = (window.minisgl = window.minisgl || {});
  const STORE = "minisgl.apiKey";

  M.key = sessionStorage.getItem(STORE) || "";
  M.setKey = function (key) {
    M.key = key;
    if (key) sessionStorage.setItem(STORE, key); else sessionStorage.removeItem(STORE);
  };

  M.headers = function (json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    if (M.key) h.Authorization = "Bearer " + M.key;
    return h;
  };

  // The message of an OpenAI error envelope, else the status line.
  M.errorText = async function (response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (e) { /* not JSON */ }
    return response.status + " " + response.statusText;
  };

  M.AuthError = class extends Error {};

  // A 401 opens the key form (set by app.js) and rejects with AuthError.
  M.check = async function (response) {
    if (response.status === 401) {
      const message = await M.errorText(response);
      if (M.onAuthError) M.onAuthError(message);
      throw new M.AuthError(message);
    }
    if (!response.ok) throw new Error(await M.errorText(response));
    return response;
  };

  M.getJSON = async function (path) {
    const r = await fetch(path, { headers: M.headers(false), cache: "no-store" });
    await M.check(r);
    return r.json();
  };

  // Yields the JSON payload of every "data:" event until [DONE] or the end of the body.
  M.readSSE = async function* (response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]") return;
            yield JSON.parse(data);
          }
        }
      }
    } finally {
      reader.releaseLock();
    }
  };
})();

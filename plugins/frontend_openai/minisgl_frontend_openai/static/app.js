// Wires the page: tabs (#chat, #dashboard), the API key form, the served model's name.
"use strict";
(function () {
  const M = (window.minisgl = window.minisgl || {});
  const $ = (id) => document.getElementById(id);

  function view() {
    return location.hash === "#dashboard" ? "dashboard" : "chat";
  }

  function show() {
    const name = view();
    for (const v of ["chat", "dashboard"]) {
      $("view-" + v).hidden = v !== name;
      $("tab-" + v).setAttribute("aria-selected", String(v === name));
    }
    // the stats endpoint is polled only while the dashboard is on screen
    if (name === "dashboard" && document.visibilityState === "visible") M.startDashboard();
    else M.stopDashboard();
  }

  async function loadModel() {
    try {
      const info = await M.getJSON("/v1/models");
      M.model = info.data && info.data.length ? info.data[0].id : undefined;
      $("model-name").textContent = M.model || "";
      $("key-panel").hidden = true;
    } catch (e) {
      if (!(e instanceof M.AuthError)) $("model-name").textContent = "(" + e.message + ")";
    }
  }

  M.onAuthError = function (message) {
    $("key-panel").hidden = false;
    $("key-msg").textContent = M.key ? message : "";
    $("key-input").focus();
  };

  $("key-button").addEventListener("click", () => {
    $("key-panel").hidden = !$("key-panel").hidden;
    if (!$("key-panel").hidden) $("key-input").focus();
  });
  $("key-panel").addEventListener("submit", (ev) => {
    ev.preventDefault();
    M.setKey($("key-input").value.trim());
    $("key-input").value = "";
    $("key-msg").textContent = "";
    loadModel();
    show();
  });
  window.addEventListener("hashchange", show);
  document.addEventListener("visibilitychange", show);
  window.addEventListener("resize", () => M.redrawDashboard());
  // on a phone the conversation gets the screen; the settings open on demand
  const phone = window.matchMedia("(max-width: 760px)");
  if (phone.matches) $("settings").open = false;
  phone.addEventListener("change", (ev) => { if (ev.matches) $("settings").open = false; });
  M.initChat();
  show();
  loadModel();
})();

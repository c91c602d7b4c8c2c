// The settings pane: lists the configured servers with their live state, adds, edits,
// removes, enables, disables and checks them, shows each server's tools (with toggles
// and tool integrity's held tools), imports another client's configuration, and keeps
// the "MCP sign-ins" view.
//
// It is opened with a single-use link, http://127.0.0.1:PORT/#open=SECRET: the secret
// is in the fragment, which the browser never sends to a server. The page takes it out
// of the address bar at once, trades it for a page session token (POST /api/session),
// keeps that token in sessionStorage (this tab and this origin, port included) and
// sends it as "Authorization: Bearer" with every request. No cookie is used. "Sign out
// of this page" ends the session; so does its expiry, or the service stopping.
//
// Views are switched by the hash once #open= is consumed: #/servers (the default),
// #/server/NAME, #/add, #/edit/NAME, #/import, #/sign-ins; back and forward work.
//
// It polls GET /api/mcp every second. Everything the server sends is data: it reaches
// the page through textContent and attribute values only, never innerHTML, and a URL is
// used as a link only when it is http(s). Secrets typed into the form go to the API
// once, in the PATCH body, and are never shown again (the fields are cleared).
//
// Rows are kept per server (and per tool) name and updated in place, so a poll never
// takes the keyboard focus away from the control it is on.
"use strict";

(function () {
  const POLL_MS = 1000;
  const GUESS_DELAY_MS = 350;
  const TOKEN_KEY = "albedo-page-token";
  const TITLE = "albedo-mcp settings";
  const NOT_OPENED = "This page is not open: run `albedo-mcp open` and follow the link it prints (each link works once).";
  const SIGNED_OUT = "Signed out of this page. Run `albedo-mcp open` to open it again.";
  const OLDER_SERVICE = "This albedo-mcp service is older than its page: restart `albedo-mcp serve` to use this.";
  const NO_ENTRY = (name) => `server ${name}: this service does not send its settings; restart \`albedo-mcp serve\` to change it here.`;

  // name -> {url, state, reason, newClient}: the sign-ins this page started (until it is reloaded).
  const signIns = new Map();
  const busy = new Set(); // names with an action in flight
  let latest = []; // the servers of the last GET /api/mcp
  let daemon = false; // the service runs a runtime: servers carry their "live" state
  let mcpOn = true; // the mcp extension is on for the session ("enabled" of GET /api/mcp)
  let loaded = false; // the first GET /api/mcp answered
  let timer = null;
  let pollFailed = false; // the last poll failed: its message is on the status line
  let token = null; // this page's session token
  let stopped = false; // signed out or never opened: no more polling
  let current = { view: "servers" }; // the view shown
  let afterRender = null; // where the focus goes once the next render ran (an action's end)
  let routed = null; // the hash the view shown was routed from

  const $ = (id) => document.getElementById(id);

  // -- small helpers ------------------------------------------------------------------

  function text(value) {
    return typeof value === "string" ? value : value === undefined || value === null ? "" : String(value);
  }

  function oneLine(value) {
    return text(value).replace(/[\u0000-\u001f\u007f]+/g, " ").slice(0, 500);
  }

  function httpUrl(value) {
    try {
      const url = new URL(text(value));
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch (e) {
      return null;
    }
  }

  function element(tag, className, content) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (content !== undefined) node.textContent = content;
    return node;
  }

  function button(className, label, ariaLabel, onClick) {
    const node = element("button", className, label);
    node.type = "button";
    if (ariaLabel) node.setAttribute("aria-label", ariaLabel);
    node.addEventListener("click", onClick);
    return node;
  }

  // Set a node's text only when it changed (a screen reader is not told the same twice).
  function setText(node, value) {
    const wanted = text(value);
    if (node.textContent !== wanted) node.textContent = wanted;
    return node;
  }

  function show(node, visible) {
    node.hidden = !visible;
    return node;
  }

  function say(message, isError) {
    const status = $("status");
    setText(status, message);
    status.className = isError ? "status error" : "status";
  }

  function failure(e, fallback) {
    return e instanceof ApiError ? e.message : fallback;
  }

  function serverOf(name) {
    return latest.find((s) => s.name === name) || null;
  }

  function entryOf(server) {
    return server && server.entry && typeof server.entry === "object" ? JSON.parse(JSON.stringify(server.entry)) : null;
  }

  function viewHref(view, name) {
    return name === undefined ? `#/${view}` : `#/${view}/${encodeURIComponent(name)}`;
  }

  // Go to a view now (a new history entry, so Back returns), without waiting for hashchange.
  function go(hash) {
    if (window.location.hash !== hash) history.pushState(null, "", hash);
    route(true);
  }

  // A "busy" control is marked, not disabled: disabling the focused button would drop the focus.
  function markBusy(node, on) {
    if (on) node.setAttribute("aria-disabled", "true");
    else node.removeAttribute("aria-disabled");
  }

  // -- the page's session -------------------------------------------------------------

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch (e) {
      return null; // storage refused: the token lives in this page's memory only
    }
  }

  function keepToken(value) {
    token = value;
    try {
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) {
      // in memory only
    }
  }

  async function openSession() {
    const hash = window.location.hash || "";
    const match = /^#open=([A-Za-z0-9_-]{20,200})$/.exec(hash);
    if (hash.startsWith("#open=")) {
      // The link's secret leaves the address bar (and this entry of the history) at once.
      history.replaceState(null, "", window.location.pathname + window.location.search);
    }
    if (match) {
      let response;
      try {
        response = await fetch("/api/session", {
          method: "POST", cache: "no-store", credentials: "omit",
          headers: { Accept: "application/json", "Content-Type": "application/json" },
          body: JSON.stringify({ open: match[1] }),
        });
      } catch (e) {
        throw new ApiError("The service does not answer: is `albedo-mcp serve` still running?");
      }
      let data = null;
      try {
        data = await response.json();
      } catch (e) {
        data = null;
      }
      if (response.status === 201 && data && typeof data.token === "string") {
        keepToken(data.token);
        return;
      }
      keepToken(null);
      const error = data && typeof data.error === "string" ? data.error : `the service answered HTTP ${response.status}`;
      throw new ApiError(oneLine(error));
    }
    token = storedToken();
    if (!token) throw new ApiError(NOT_OPENED);
  }

  async function signOutOfPage() {
    const was = token;
    keepToken(null);
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (was) {
      try {
        await fetch("/api/session", {
          method: "DELETE", cache: "no-store", credentials: "omit", headers: { Authorization: `Bearer ${was}` },
        });
      } catch (e) {
        // the service is gone: the session went with it
      }
    }
    latest = [];
    renderLists();
    closed();
    say(SIGNED_OUT, false);
  }

  function closed() {
    // Nothing of the settings stays on a page that is no longer open.
    $("page-sign-out").hidden = true;
    $("nav").hidden = true;
    document.querySelector("main").hidden = true;
    clearSecrets();
  }

  // -- the API ------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status || 0;
      // The service has no such route (it is older than this page).
      this.missing = (status === 404 || status === 405) && /: (not found|method not allowed)$/i.test(message);
    }
  }

  async function api(method, path, body) {
    if (!token) throw new ApiError(NOT_OPENED);
    const init = {
      method, credentials: "omit", cache: "no-store",
      headers: { Accept: "application/json", Authorization: `Bearer ${token}` },
    };
    if (method !== "GET") {
      // A state change is JSON: the service refuses anything else.
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError("The service does not answer: is `albedo-mcp serve` still running?");
    }
    if (response.status === 204) return null;
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      data = null;
    }
    if (response.status === 401) {
      // Expired, signed out elsewhere, or the service restarted: this token is spent.
      keepToken(null);
      stopped = true;
      closed();
      throw new ApiError("This page's session has ended (it expired, or the service restarted): run `albedo-mcp open` for a new link.", 401);
    }
    if (!response.ok) {
      const error = data && typeof data.error === "string" ? data.error : `the service answered HTTP ${response.status}`;
      throw new ApiError(oneLine(error), response.status);
    }
    return data;
  }

  const loginPath = (name) => `/api/auth/logins/${encodeURIComponent("mcp:" + name)}`;

  // Apply a PATCH /api/mcp body; its answer is the new list.
  async function patch(body) {
    const answer = await api("PATCH", "/api/mcp", body);
    take(answer);
    return answer;
  }

  function take(body) {
    if (body && Array.isArray(body.servers)) {
      latest = body.servers.filter((s) => s && typeof s.name === "string");
      daemon = body.daemon === true;
      mcpOn = !(body.enabled && typeof body.enabled === "object" && body.enabled.mcp === false);
    }
  }

  // -- what a server's state means here -------------------------------------------------

  function auth(server) {
    return server && typeof server.auth === "object" && server.auth !== null ? server.auth : {};
  }

  function live(server) {
    return server && typeof server.live === "object" && server.live !== null ? server.live : null;
  }

  function needsSignIn(server) {
    const a = auth(server);
    return a.state === "needs_sign_in" || a.state === "signed_out" || Boolean(a.step_up);
  }

  function signedIn(server) {
    return auth(server).state === "signed_in";
  }

  // The sign-ins view's words for a server (as the page always said them).
  function signInText(server) {
    const a = auth(server);
    const mine = signIns.get(server.name);
    if (mine && mine.state === "pending") return "signing in…";
    if (typeof server.problem === "string" && server.problem) return text(server.state); // "credentials unreadable"
    if (server.enabled === false) return "disabled";
    if (a.state === "signed_in") return a.step_up ? "signed in; more access asked" : "signed in";
    if (a.state === "needs_sign_in") return "needs sign-in";
    if (a.state === "signed_out") return "signed out";
    return text(server.state);
  }

  const LIVE_WORDS = {
    ok: "ok", starting: "starting", down: "down", needs_sign_in: "needs sign-in", misconfigured: "misconfigured", off: "off",
  };
  const TONES = {
    ok: "good", "signed in": "good", "catalogue saved": "good",
    starting: "info", "signing in…": "info", "not discovered yet": "info", "catalogue outdated": "info",
    down: "bad", misconfigured: "bad", "credentials unreadable": "bad", failed: "bad",
    needs_sign_in: "warn", "needs sign-in": "warn", "signed out": "warn", "signed in; more access asked": "warn",
    off: "off", disabled: "off",
  };

  // {word, label}: the live state (with a daemon), else the saved view's state.
  function stateOf(server) {
    const now = live(server);
    if (now && typeof now.state === "string") return { word: now.state, label: LIVE_WORDS[now.state] || now.state };
    return { word: text(server.state), label: signInText(server) };
  }

  function paintState(node, word, label) {
    setText(node, label);
    if (node.dataset.state !== word) node.dataset.state = word;
    const tone = TONES[word] || TONES[label] || "info";
    if (node.dataset.tone !== tone) node.dataset.tone = tone;
  }

  function minutes(seconds) {
    if (seconds < 90) return `${Math.max(1, Math.round(seconds))} s`;
    if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
    if (seconds < 36 * 3600) return `${Math.round(seconds / 3600)} h`;
    return `${Math.round(seconds / 86400)} days`;
  }

  function authText(server) {
    const a = auth(server);
    if (a.state === "signed_in") {
      let out = "signed in";
      if (typeof a.account === "string" && a.account) out += ` as ${oneLine(a.account)}`;
      if (typeof a.expires_at === "number") {
        const left = a.expires_at - Date.now() / 1000;
        out += left > 0 ? `; token expires in ${minutes(left)}` : "; token expired (it is refreshed when used)";
      }
      return out;
    }
    return ""; // needing a sign-in: the state's badge and the Sign in button say it
  }

  function eraText(server) {
    const now = live(server);
    if (!now) return "";
    if (typeof now.protocolVersion === "string" && now.protocolVersion) return `MCP ${oneLine(now.protocolVersion)}`;
    return typeof now.era === "string" && now.era ? `MCP ${oneLine(now.era)}` : "";
  }

  function toolsText(server) {
    const now = live(server);
    const count = now && typeof now.tools === "number" ? now.tools : null;
    let out = count === null ? "" : `${count} tool${count === 1 ? "" : "s"}`;
    if (typeof server.held === "number" && server.held > 0) out += `${out ? ", " : ""}${server.held} held`;
    return out;
  }

  function errorOf(server) {
    if (typeof server.problem === "string" && server.problem) return { text: oneLine(server.problem), problem: true };
    const now = live(server);
    if (now && now.state === "off" && !mcpOn) return { text: "", problem: false }; // said once, above the list
    if (now && now.error) return { text: oneLine(now.error), problem: false };
    const seen = server.lastSeen;
    if (!now && seen && typeof seen === "object" && seen.error && !seen.configurationChanged
        && (seen.state === "down" || seen.state === "misconfigured")) {
      return { text: oneLine(seen.error), problem: false };
    }
    return { text: "", problem: false };
  }

  function stderrOf(server) {
    const now = live(server);
    return now && Array.isArray(now.stderr) ? now.stderr.map(oneLine).join("\n") : "";
  }

  function canSignIn(server) {
    if (server.transport !== "http" || server.enabled === false) return false;
    const now = live(server);
    return needsSignIn(server) || Boolean(now && now.state === "needs_sign_in");
  }

  // -- routing ------------------------------------------------------------------------

  function parseHash() {
    const hash = window.location.hash || "";
    let match;
    try {
      if ((match = /^#\/server\/(.+)$/.exec(hash))) return { view: "server", name: decodeURIComponent(match[1]) };
      if ((match = /^#\/edit\/(.+)$/.exec(hash))) return { view: "form", mode: "edit", name: decodeURIComponent(match[1]) };
    } catch (e) {
      return { view: "servers" }; // a malformed name
    }
    if (hash === "#/add") return { view: "form", mode: "add" };
    if (hash === "#/import") return { view: "import" };
    if (hash === "#/sign-ins") return { view: "sign-ins" };
    return { view: "servers" };
  }

  const SECTIONS = { servers: "view-servers", server: "view-server", form: "view-form", import: "view-import", "sign-ins": "view-sign-ins" };
  const NAV = { servers: "nav-servers", "sign-ins": "nav-sign-ins", import: "nav-import", add: "nav-add" };
  const HEADINGS = { servers: "servers-title", server: "server-title", form: "form-title", import: "import-title", "sign-ins": "sign-ins-title" };

  // Show the view the hash names; ``moved``: the user went there (the focus follows).
  function route(moved) {
    if (stopped) return;
    routed = window.location.hash;
    const next = parseHash();
    const leaving = current;
    current = next;
    for (const [view, id] of Object.entries(SECTIONS)) $(id).hidden = view !== next.view;
    const navKey = next.view === "form" && next.mode === "add" ? "add" : next.view === "server" || next.view === "form" ? "servers" : next.view;
    for (const [key, id] of Object.entries(NAV)) {
      if (key === navKey) $(id).setAttribute("aria-current", "page");
      else $(id).removeAttribute("aria-current");
    }
    if (leaving.view === "form" && next.view !== "form") clearSecrets();
    if (next.view === "form") openForm(next);
    if (next.view === "server") openServer(next.name);
    if (next.view === "import") $("import-error").hidden = true;
    const titles = { servers: "Servers", "sign-ins": "MCP sign-ins", import: "Import", server: next.name, form: next.mode === "add" ? "Add a server" : `Edit ${next.name}` };
    document.title = `${titles[next.view]} · ${TITLE}`;
    const focusChosen = afterRender !== null; // an action said where the focus goes
    // The user went elsewhere: the last action's line is old news (a failing poll's stays).
    if (moved && !focusChosen && !pollFailed && $("status").textContent !== "Loading…") say("", false);
    renderLists();
    if (moved && !focusChosen) {
      const heading = $(HEADINGS[next.view]);
      if (heading) heading.focus({ preventScroll: false });
    }
  }

  // -- rendering: the servers view ----------------------------------------------------

  function makeServerRow(name) {
    const row = element("li", "row server-row");
    row.dataset.server = name;
    const info = element("div", "info");
    const head = element("div", "head");
    head.append(element("span", "name", name), element("span", "transport chip"));
    info.append(head, element("p", "target"));
    const status = element("div", "status-col");
    const facts = element("p", "facts");
    facts.append(element("span", "era"), element("span", "tools-count"), element("span", "auth"), element("span", "source"));
    status.append(element("span", "state badge"), facts);
    const actions = element("div", "actions");
    actions.append(
      button("details small", "Details", `Details and tools of ${name}`, () => go(viewHref("server", name))),
      button("sign-in small", "Sign in", `Sign in to ${name}`, () => signInFromList(name)),
      button("edit small secondary", "Edit", `Edit ${name}`, () => go(viewHref("edit", name))),
      button("enable small secondary", "Enable", `Enable ${name}`, (ev) => setEnabled(name, true, ev.currentTarget)),
      button("disable small secondary", "Disable", `Disable ${name}`, (ev) => setEnabled(name, false, ev.currentTarget)),
      button("check small secondary", "Check", `Check ${name} now`, (ev) => check(name, ev.currentTarget)),
      button("remove small danger-quiet", "Remove", `Remove ${name}`, (ev) => remove(name, ev.currentTarget)),
    );
    const problem = element("p", "error");
    const stderr = element("pre", "stderr");
    stderr.setAttribute("aria-label", `The last lines ${name} wrote to stderr`);
    stderr.tabIndex = 0; // a long tail scrolls: reachable by keyboard
    row.append(info, status, problem, stderr, actions);
    return row;
  }

  function updateServerRow(row, server) {
    const name = server.name;
    setText(row.querySelector(".transport"), server.transport);
    setText(row.querySelector(".target"), server.target);
    const state = stateOf(server);
    paintState(row.querySelector(".state"), state.word, state.label);
    const seen = live(server);
    const source = seen && seen.source === "check" ? "as the last Check saw it" : "";
    for (const [css, value] of [[".era", eraText(server)], [".tools-count", toolsText(server)], [".auth", authText(server)],
                                [".source", source]]) {
      const node = row.querySelector(css);
      show(setText(node, value), Boolean(value));
    }
    const error = errorOf(server);
    const problem = row.querySelector(".error");
    // A sign-in asked for is not a failure: its reason is shown calmly beside the Sign in button.
    problem.className = error.problem ? "error problem" : state.word === "needs_sign_in" ? "error calm" : "error";
    show(setText(problem, error.text), Boolean(error.text));
    const stderr = row.querySelector(".stderr");
    show(setText(stderr, stderrOf(server)), Boolean(stderr.textContent));
    const working = busy.has(name);
    const enabled = server.enabled !== false;
    if (!working) {
      // Not while an action on it is in flight: the button pressed stays (a poll never takes the focus).
      show(row.querySelector("button.enable"), !enabled);
      show(row.querySelector("button.disable"), enabled);
    }
    show(row.querySelector("button.sign-in"), canSignIn(server) && !(signIns.get(name) || {}).url);
    for (const node of row.querySelectorAll("button")) markBusy(node, working);
  }

  // Keep one element per key, in the order of ``items``, updated in place.
  function renderKeyed(list, items, keyOf, make, update, attribute) {
    const nodes = new Map();
    for (const node of list.children) nodes.set(node.dataset[attribute], node);
    const wanted = new Set(items.map(keyOf));
    for (const [key, node] of nodes) if (!wanted.has(key)) node.remove();
    let previous = null;
    for (const item of items) {
      const key = keyOf(item);
      let node = nodes.get(key);
      if (!node) node = make(key, item);
      update(node, item);
      const next = previous ? previous.nextSibling : list.firstChild;
      if (node !== next) list.insertBefore(node, next);
      previous = node;
    }
  }

  // -- rendering: the sign-ins view ---------------------------------------------------

  function makeSignInRow(name) {
    const row = element("li", "row sign-in-row");
    row.dataset.server = name;
    const info = element("div", "info");
    const head = element("div", "head");
    head.append(element("span", "name", name), element("span", "transport chip"));
    info.append(head);
    const status = element("div", "status-col");
    status.append(element("span", "state badge"));
    const actions = element("div", "actions");
    actions.append(
      button("sign-in small", "Sign in", `Sign in to ${name}`, () => startSignIn(name, false)),
      button("new-client small", "Sign in again with a new client", `Sign in to ${name} again with a new client`, () => startSignIn(name, true)),
      button("cancel small secondary", "Cancel", `Cancel the sign-in to ${name}`, () => cancelSignIn(name)),
      button("sign-out small secondary", "Sign out", `Sign out of ${name}`, () => signOutOf(name)),
    );
    const detail = element("p", "detail");
    row.append(info, status, detail, actions);
    return row;
  }

  function updateSignInRow(row, server) {
    const name = server.name;
    const mine = signIns.get(name);
    setText(row.querySelector(".transport"), server.transport);
    const label = mine && mine.state === "failed" ? "sign-in failed" : signInText(server);
    paintState(row.querySelector(".state"), mine && mine.state === "failed" ? "failed" : label, label);
    const pending = Boolean(mine && mine.state === "pending");
    const working = busy.has(name);
    const newClient = Boolean(mine && mine.newClient && !pending);
    show(row.querySelector("button.sign-in"), !pending && needsSignIn(server));
    show(row.querySelector("button.new-client"), newClient);
    show(row.querySelector("button.cancel"), pending);
    show(row.querySelector("button.sign-out"), !pending && signedIn(server));
    for (const node of row.querySelectorAll("button")) markBusy(node, working);

    const detail = row.querySelector(".detail");
    const parts = [];
    if (mine && mine.state === "pending" && mine.url) {
      const link = element("a", "authorization-link", "Open the authorization page");
      link.href = mine.url;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      parts.push(link, document.createTextNode(" (it opened in a new tab; finish signing in there)"));
    } else if (mine && (mine.state === "failed" || mine.state === "cancelled") && mine.reason) {
      parts.push(element("span", "error", `The sign-in ${mine.state === "failed" ? "failed" : "was cancelled"}: ${oneLine(mine.reason)}`));
    } else if (needsSignIn(server) && auth(server).reason) {
      parts.push(element("span", "reason", oneLine(auth(server).reason)));
    }
    if (auth(server).step_up) {
      parts.push(element("span", "reason", ` More access asked: ${oneLine(auth(server).step_up)}.`));
    }
    // Rebuild the detail only when it changed, so a focused link keeps its focus.
    const key = parts.map((p) => (p.href || "") + p.textContent).join("|");
    if (detail.dataset.key !== key) {
      detail.dataset.key = key;
      detail.replaceChildren(...parts);
    }
    detail.hidden = parts.length === 0;
  }

  function renderLists() {
    const servers = latest;
    renderKeyed($("servers-list"), servers, (s) => s.name, makeServerRow, updateServerRow, "server");
    $("servers-empty").hidden = !loaded || servers.length > 0;
    $("servers-head").hidden = servers.length === 0;
    $("mcp-off").hidden = !loaded || mcpOn;
    // The sign-ins list the servers that asked for a sign-in, and keeps those this page
    // is signing in or signed in, so a row does not vanish under its user.
    const asked = servers.filter((s) => s.transport === "http" && (needsSignIn(s) || signIns.has(s.name)));
    renderKeyed($("sign-ins-list"), asked, (s) => s.name, makeSignInRow, updateSignInRow, "server");
    $("sign-ins-empty").hidden = !loaded || asked.length > 0;
    const waiting = servers.filter((s) => s.enabled !== false && canSignIn(s)).length;
    const count = document.querySelector("#nav-sign-ins .count");
    setText(count, waiting ? String(waiting) : "");
    count.hidden = waiting === 0;
    $("nav-sign-ins").setAttribute("aria-label", waiting ? `MCP sign-ins, ${waiting} needed` : "MCP sign-ins");
    if (current.view === "server") renderServerHead();
    if (afterRender !== null) {
      const target = afterRender();
      afterRender = null;
      if (target) target.focus();
    }
  }

  // -- actions on a server ------------------------------------------------------------

  function focusInRow(name, css) {
    return () => {
      const row = document.querySelector(`#servers-list li[data-server="${CSS.escape(name)}"]`);
      const wanted = row ? [...row.querySelectorAll(css)].find((n) => !n.hidden) : null;
      return wanted || (row ? row.querySelector("button.details") : null);
    };
  }

  async function setEnabled(name, on, from) {
    if (busy.has(name)) return;
    const server = serverOf(name);
    const entry = entryOf(server);
    if (!entry) {
      say(NO_ENTRY(name), true);
      return;
    }
    if (on) delete entry.enabled; // enabled is the default (as `albedo-mcp enable` writes it)
    else entry.enabled = false;
    busy.add(name);
    renderLists();
    say(on ? `Enabling ${name}: connecting…` : `Disabling ${name}…`, false);
    try {
      await patch({ servers: { [name]: entry } });
      say(on ? `${name} is enabled: it connected.` : `${name} is disabled.`, false);
      if (from && from.closest("#servers-list")) afterRender = focusInRow(name, on ? "button.disable" : "button.enable");
    } catch (e) {
      say(failure(e, `${on ? "Enabling" : "Disabling"} ${name} failed.`), true);
    } finally {
      busy.delete(name);
      renderLists();
    }
  }

  async function remove(name, from) {
    if (busy.has(name)) return;
    const yes = await confirm(`Remove ${name}? Its settings and stored secrets are deleted.`, "Remove");
    if (!yes) {
      if (from) from.focus();
      return;
    }
    busy.add(name);
    renderLists();
    // Where the focus goes after: the next server's row (or the one before), else the heading.
    const names = latest.map((s) => s.name);
    const at = names.indexOf(name);
    const neighbour = names[at + 1] || names[at - 1] || null;
    try {
      await patch({ servers: { [name]: null } });
      signIns.delete(name);
      say(`${name} was removed.`, false);
      afterRender = neighbour ? focusInRow(neighbour, "button.details") : () => $("servers-title");
      if (current.view !== "servers") go("#/servers");
    } catch (e) {
      say(failure(e, `Removing ${name} failed.`), true);
      if (from) afterRender = () => from;
    } finally {
      busy.delete(name);
      renderLists();
    }
  }

  function checkSummary(name, report) {
    const state = text(report && report.state) || "unknown";
    const parts = [];
    if (typeof report.tools === "number") parts.push(`${report.tools} tool${report.tools === 1 ? "" : "s"}`);
    if (typeof report.readyMs === "number") parts.push(`ready in ${report.readyMs} ms`);
    let line = `${name}: ${LIVE_WORDS[state] || state}${parts.length ? ` (${parts.join(", ")})` : ""}`;
    if (report.error) line += `: ${oneLine(report.error)}`;
    return line;
  }

  async function check(name, from) {
    if (busy.has(name)) return;
    busy.add(name);
    renderLists();
    const inView = current.view === "server" && current.name === name;
    const label = from ? from.textContent : "";
    if (from) from.textContent = "Checking…";
    say(`Checking ${name}…`, false);
    try {
      const report = await api("POST", "/api/mcp/doctor", { server: name });
      say(checkSummary(name, report || {}), !report || report.state !== "ok");
      if (inView) showCheck(report || {});
      if (inView) loadTools(name);
    } catch (e) {
      say(e.missing ? OLDER_SERVICE : failure(e, `Checking ${name} failed.`), true);
    } finally {
      if (from) from.textContent = label;
      busy.delete(name);
      refreshSoon();
    }
  }

  async function turnMcpOn(from) {
    if (from.getAttribute("aria-disabled") === "true") return;
    markBusy(from, true);
    try {
      await patch({ enabled: { mcp: true } });
      say("MCP is on for the session: its servers start now.", false);
      afterRender = () => $("servers-title");
    } catch (e) {
      say(failure(e, "Turning MCP on failed."), true);
    } finally {
      markBusy(from, false);
      renderLists();
    }
  }

  // -- the confirmation dialog ------------------------------------------------------

  function confirm(message, yesLabel) {
    const dialog = $("confirm");
    setText($("confirm-text"), message);
    setText($("confirm-yes"), yesLabel);
    return new Promise((resolve) => {
      const done = (answer) => {
        $("confirm-yes").removeEventListener("click", yes);
        $("confirm-no").removeEventListener("click", no);
        dialog.removeEventListener("cancel", cancel);
        if (dialog.open) dialog.close();
        resolve(answer);
      };
      const yes = () => done(true);
      const no = () => done(false);
      const cancel = (ev) => {
        ev.preventDefault();
        done(false);
      };
      $("confirm-yes").addEventListener("click", yes);
      $("confirm-no").addEventListener("click", no);
      dialog.addEventListener("cancel", cancel); // Escape
      dialog.showModal();
      $("confirm-no").focus(); // the safe answer first
    });
  }

  // -- sign-ins ----------------------------------------------------------------------

  async function signInFromList(name) {
    await startSignIn(name, false);
    if (signIns.has(name)) {
      afterRender = () => {
        const row = document.querySelector(`#sign-ins-list li[data-server="${CSS.escape(name)}"]`);
        if (!row) return null;
        return row.querySelector("a.authorization-link") || [...row.querySelectorAll("button")].find((b) => !b.hidden) || null;
      };
      go("#/sign-ins");
    }
  }

  async function startSignIn(name, newClient) {
    if (busy.has(name)) return;
    busy.add(name);
    renderLists();
    try {
      const started = await api("PUT", loginPath(name), newClient ? { newClient: true } : {});
      if (started && typeof started.state === "string" && started.state !== "pending") {
        // Ended at once (a client credentials sign-in needs no browser).
        signIns.set(name, { url: null, state: started.state, reason: started.reason ? oneLine(started.reason) : null, newClient: started.newClient === true });
        say(started.state === "signed_in" ? `Signed in to ${name}.` : `The sign-in to ${name} ${started.state}.`, started.state !== "signed_in");
        return;
      }
      const url = httpUrl(started && started.authorizationUrl);
      if (!url) throw new ApiError(`server ${name}: the service gave no usable authorization URL`);
      signIns.set(name, { url, state: "pending", reason: null, newClient: false });
      // A new tab for the authorization page; noopener: that page gets no handle on this one.
      window.open(url, "_blank", "noopener,noreferrer");
      say(`Signing in to ${name}: finish in the new tab, or use the link below.`, false);
    } catch (e) {
      say(failure(e, `Signing in to ${name} failed.`), true);
    } finally {
      busy.delete(name);
      renderLists();
    }
  }

  async function cancelSignIn(name) {
    if (busy.has(name)) return;
    busy.add(name);
    try {
      await api("DELETE", loginPath(name), {});
      const mine = signIns.get(name);
      if (mine) mine.state = "cancelled";
      say(`The sign-in to ${name} was cancelled.`, false);
      afterRender = () => {
        const row = document.querySelector(`#sign-ins-list li[data-server="${CSS.escape(name)}"]`);
        return row ? [...row.querySelectorAll("button")].find((b) => !b.hidden) || null : null;
      };
    } catch (e) {
      say(failure(e, `Cancelling the sign-in to ${name} failed.`), true);
    } finally {
      busy.delete(name);
      refreshSoon();
    }
  }

  async function signOutOf(name) {
    if (busy.has(name)) return;
    busy.add(name);
    renderLists();
    try {
      await patch({ secrets: { [name]: { oauth: null } } });
      signIns.delete(name);
      say(`Signed out of ${name}.`, false);
      afterRender = () => {
        const row = document.querySelector(`#sign-ins-list li[data-server="${CSS.escape(name)}"]`);
        return row ? [...row.querySelectorAll("button")].find((b) => !b.hidden) || null : null;
      };
    } catch (e) {
      say(failure(e, `Signing out of ${name} failed.`), true);
    } finally {
      busy.delete(name);
      renderLists();
    }
  }

  async function pollSignIns() {
    for (const [name, mine] of signIns) {
      if (mine.state !== "pending") continue;
      const status = await api("GET", loginPath(name));
      const again = status && status.state === "pending" ? httpUrl(status.authorizationUrl) : null;
      if (again && again !== mine.url) {
        // The authorization server refused the client; the service registered a new one:
        // a new authorization page (a link, as a poll may not open a tab).
        mine.url = again;
        say(typeof status.notice === "string" ? oneLine(status.notice) : `Signing in to ${name}: open the new authorization page.`, false);
      }
      if (status && typeof status.state === "string" && status.state !== "pending") {
        mine.state = status.state;
        mine.reason = status.reason ? oneLine(status.reason) : null;
        mine.newClient = status.newClient === true;
        if (status.state === "signed_in") say(`Signed in to ${name}.`, false);
        else if (status.state === "failed") say(`The sign-in to ${name} failed${mine.reason ? ": " + mine.reason : "."}`, true);
      }
    }
  }

  // -- the server view: tools, held tools, check ----------------------------------------

  const detail = { name: null, key: null, loading: false, data: null };

  function openServer(name) {
    if (detail.name !== name) {
      detail.name = name;
      detail.key = null;
      detail.data = null;
      $("held-list").replaceChildren();
      $("tools-list").replaceChildren();
      $("check-result").hidden = true;
      $("held").hidden = true;
      $("tools-empty").hidden = true;
      setText($("tools-source"), "");
    }
    setText($("server-title"), name);
    renderServerHead();
  }

  function renderServerHead() {
    const name = current.name;
    const server = serverOf(name);
    const note = $("server-note");
    $("server-actions").hidden = !server;
    if (!server) {
      if (loaded) {
        show(setText(note, `No server named ${name} is configured.`), true);
        paintState($("server-state"), "", "");
        $("server-state").hidden = true;
      }
      return;
    }
    $("server-state").hidden = false;
    const state = stateOf(server);
    paintState($("server-state"), state.word, state.label);
    setText($("server-target"), `${text(server.transport)} · ${text(server.target)}`);
    const error = errorOf(server);
    show(setText(note, error.text), Boolean(error.text));
    note.className = error.text ? "note error" : "note";
    const working = busy.has(name);
    for (const node of $("server-actions").querySelectorAll("button")) markBusy(node, working);
    // The tools change when the server's state, tool count or held count does, or when the
    // session's composition is a new one (``at``: an approval or a reload landed in it).
    const now = live(server);
    const key = JSON.stringify([now && now.state, now && now.tools, now && now.at, server.held, server.enabled]);
    if (key !== detail.key && !detail.loading) {
      detail.key = key;
      loadTools(name);
    }
  }

  async function loadTools(name) {
    detail.loading = true;
    try {
      const data = await api("GET", `/api/mcp/tools/${encodeURIComponent(name)}`);
      if (current.view !== "server" || current.name !== name) return;
      detail.data = data;
      renderTools(name, data || {});
    } catch (e) {
      if (current.view !== "server" || current.name !== name) return;
      setText($("tools-source"), e.missing ? OLDER_SERVICE : failure(e, `The tools of ${name} could not be read.`));
      $("tools-source").className = "hint error";
    } finally {
      detail.loading = false;
    }
  }

  const SOURCES = {
    daemon: "As the running session sees them now.",
    saved: "From the catalogue saved at the last connection.",
    none: "Not discovered yet: use Check now.",
  };

  function renderTools(name, data) {
    const source = $("tools-source");
    source.className = "hint";
    let words = SOURCES[data.source] || "";
    if (data.source === "saved" && typeof data.savedAt === "number") {
      words = `From the catalogue saved ${new Date(data.savedAt * 1000).toLocaleString()}.`;
    }
    setText(source, words);
    const tools = Array.isArray(data.tools) ? data.tools.filter((t) => t && typeof t.name === "string") : [];
    renderKeyed($("tools-list"), tools, (t) => t.name, (key) => makeTool(name, key), updateTool, "tool");
    $("tools-empty").hidden = tools.length > 0 || data.source !== "none";
    const held = Array.isArray(data.held) ? data.held.filter((h) => h && typeof h.tool === "string") : [];
    renderKeyed($("held-list"), held, (h) => h.tool, (key) => makeHeld(name, key), updateHeld, "tool");
    $("held").hidden = held.length === 0;
  }

  let toolIds = 0;

  function makeTool(server, tool) {
    const row = element("li", "row tool");
    row.dataset.tool = tool;
    const head = element("div", "tool-head");
    const names = element("div", "tool-names");
    names.append(element("code", "tool-name", tool), element("span", "tool-title"), element("span", "chip held-chip", "held"));
    const toggle = element("div", "toggle");
    const input = document.createElement("input");
    input.type = "checkbox";
    input.className = "tool-enabled";
    input.id = `tool-enabled-${++toolIds}`;
    const label = element("label", "", "Offered");
    label.htmlFor = input.id;
    label.append(element("span", "visually-hidden", `: ${tool}`));
    input.addEventListener("change", () => toggleTool(server, tool, input));
    toggle.append(input, label);
    head.append(names, toggle);
    row.append(head, element("p", "tool-description"), element("div", "tool-params"));
    return row;
  }

  function typeOf(schema) {
    if (!schema || typeof schema !== "object") return "";
    if (Array.isArray(schema.type)) return schema.type.map(text).join(" | ");
    if (typeof schema.type === "string") {
      if (schema.type === "array" && schema.items && typeof schema.items.type === "string") return `array of ${schema.items.type}`;
      return schema.type;
    }
    if (Array.isArray(schema.enum)) return "one of " + schema.enum.map((v) => JSON.stringify(v)).join(", ");
    if (Array.isArray(schema.anyOf) || Array.isArray(schema.oneOf)) return "one of several types";
    return "";
  }

  function updateTool(row, tool) {
    setText(row.querySelector(".tool-title"), tool.title && tool.title !== tool.name ? oneLine(tool.title) : "");
    row.querySelector(".tool-title").hidden = !(tool.title && tool.title !== tool.name);
    row.querySelector(".held-chip").hidden = !tool.held;
    const description = text(tool.description).slice(0, 4000);
    setText(row.querySelector(".tool-description"), description || "No description.");
    row.querySelector(".tool-description").classList.toggle("muted", !description);
    const input = row.querySelector("input.tool-enabled");
    if (input.getAttribute("aria-disabled") !== "true") input.checked = tool.enabled !== false;
    row.classList.toggle("off", tool.enabled === false);
    const schema = tool.inputSchema && typeof tool.inputSchema === "object" ? tool.inputSchema : {};
    const key = JSON.stringify(schema);
    const params = row.querySelector(".tool-params");
    if (params.dataset.key === key) return;
    params.dataset.key = key;
    const properties = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
    const required = new Set(Array.isArray(schema.required) ? schema.required.map(text) : []);
    const names = Object.keys(properties);
    if (names.length === 0) {
      params.replaceChildren(element("p", "muted", "No parameters."));
      return;
    }
    const list = element("dl", "params");
    for (const param of names.slice(0, 100)) {
      const spec = properties[param] && typeof properties[param] === "object" ? properties[param] : {};
      const term = element("dt");
      term.append(element("code", "param-name", param));
      const kind = typeOf(spec);
      if (kind) term.append(element("span", "param-type", kind));
      if (required.has(param)) term.append(element("span", "param-required", "required"));
      const said = text(spec.description).slice(0, 2000);
      const explained = element("dd", said ? "" : "muted", said || "(no description)");
      list.append(term, explained);
    }
    params.replaceChildren(element("p", "params-title", "Parameters"), list);
  }

  function shown(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (e) {
      return text(value);
    }
  }

  function makeHeld(server, tool) {
    const row = element("li", "row held-row");
    row.dataset.tool = tool;
    const head = element("div", "tool-head");
    head.append(element("code", "tool-name", tool === "(instructions)" ? "The server's instructions" : tool));
    const approve = button("approve small", "Approve", `Approve ${tool}`, () => approveHeld(server, tool, approve));
    head.append(approve);
    const diff = element("div", "diff");
    const before = element("div", "side");
    before.append(element("p", "side-title", "Approved before"), element("pre", "old"));
    const after = element("div", "side");
    after.append(element("p", "side-title", "Now"), element("pre", "new"));
    diff.append(before, after);
    for (const pre of diff.querySelectorAll("pre")) pre.tabIndex = 0;
    row.append(head, element("p", "changes"), diff);
    return row;
  }

  function updateHeld(row, held) {
    const changes = Array.isArray(held.changes) ? held.changes.map(text) : [];
    setText(row.querySelector(".changes"), held.kind === "new" ? "New since the last approval." : `Changed: ${changes.join(", ") || "its definition"}.`);
    const keys = changes.length ? changes : ["description"];
    const describe = (side) => {
      if (!side || typeof side !== "object") return "(nothing: it is new)";
      return keys.map((k) => (keys.length > 1 || k !== "description" ? `${k}: ` : "") + shown(side[k] === undefined ? "(none)" : side[k])).join("\n\n").slice(0, 6000);
    };
    setText(row.querySelector(".old"), describe(held.old));
    setText(row.querySelector(".new"), describe(held.new));
  }

  async function approveHeld(server, tool, from) {
    if (busy.has(server)) return;
    busy.add(server);
    markBusy(from, true);
    const rows = [...$("held-list").children];
    const at = rows.findIndex((r) => r.dataset.tool === tool);
    try {
      await api("POST", "/api/mcp/approve", { server, tools: [tool] });
      say(`${tool} of ${server} is approved.`, false);
      await loadTools(server);
      const next = [...$("held-list").children];
      const focus = next[Math.min(at, next.length - 1)];
      if (focus) focus.querySelector("button.approve").focus();
      else $("tools-title").focus();
    } catch (e) {
      say(e.missing ? OLDER_SERVICE : failure(e, `Approving ${tool} of ${server} failed.`), true);
      markBusy(from, false);
    } finally {
      busy.delete(server);
      refreshSoon();
    }
  }

  async function toggleTool(server, tool, input) {
    const on = input.checked;
    const entry = entryOf(serverOf(server));
    if (busy.has(server) || !entry) {
      input.checked = !on;
      if (!entry) say(NO_ENTRY(server), true);
      return;
    }
    let disabled = Array.isArray(entry.disabledTools) ? entry.disabledTools.filter((t) => t !== tool) : [];
    let enabled = Array.isArray(entry.enabledTools) ? entry.enabledTools.filter((t) => t !== tool) : null;
    if (on) {
      if (enabled !== null) enabled.push(tool);
    } else {
      disabled.push(tool);
    }
    if (disabled.length) entry.disabledTools = disabled;
    else delete entry.disabledTools;
    if (enabled !== null) entry.enabledTools = enabled;
    busy.add(server);
    markBusy(input, true);
    try {
      await patch({ servers: { [server]: entry } });
      say(on ? `${tool} of ${server} is offered again.` : `${tool} of ${server} is no longer offered.`, false);
      markBusy(input, false);
      await loadTools(server);
    } catch (e) {
      input.checked = !on;
      say(failure(e, `Changing ${tool} of ${server} failed.`), true);
    } finally {
      markBusy(input, false);
      busy.delete(server);
      renderLists();
    }
  }

  function showCheck(report) {
    const box = $("check-result");
    const state = text(report.state) || "unknown";
    paintState(box.querySelector(".state"), state, LIVE_WORDS[state] || state);
    const facts = [];
    if (report.protocolVersion) facts.push(`MCP ${oneLine(report.protocolVersion)}`);
    for (const what of ["tools", "resources", "prompts"]) {
      if (typeof report[what] === "number") facts.push(`${report[what]} ${what}`);
    }
    if (typeof report.readyMs === "number") facts.push(`ready in ${report.readyMs} ms`);
    setText(box.querySelector(".facts"), facts.join(" · "));
    show(setText(box.querySelector(".error"), report.error ? oneLine(report.error) : ""), Boolean(report.error));
    const tail = Array.isArray(report.stderr) ? report.stderr.map(oneLine).join("\n") : "";
    show(setText(box.querySelector(".stderr"), tail), Boolean(tail));
    box.hidden = false;
  }

  // -- the form: add and edit -----------------------------------------------------------

  const form = { mode: "add", name: null, target: null, nameTyped: false, guessSeq: 0, guessTimer: null, saving: false,
                 storedHeaders: [], storedEnv: [], clientId: "" };

  function clearSecrets() {
    for (const node of document.querySelectorAll('#view-form input[type="password"], #import-inputs input')) node.value = "";
  }

  function pairRow(kind, name, stored) {
    const row = element("div", `${kind}-row pair`);
    const id = ++toolIds;
    if (stored) row.dataset.stored = name;
    const nameField = element("div", "field");
    const nameLabel = element("label", "", kind === "header" ? "Header name" : "Variable");
    nameLabel.htmlFor = `${kind}-name-${id}`;
    const nameInput = document.createElement("input");
    nameInput.type = "text";
    nameInput.id = nameLabel.htmlFor;
    nameInput.className = `${kind}-name`;
    nameInput.autocomplete = "off";
    nameInput.spellcheck = false;
    nameInput.value = name || "";
    nameField.append(nameLabel, nameInput);
    const valueField = element("div", "field");
    const valueLabel = element("label", "", "Value");
    valueLabel.htmlFor = `${kind}-value-${id}`;
    const valueInput = document.createElement("input");
    valueInput.type = "password";
    valueInput.id = valueLabel.htmlFor;
    valueInput.className = `${kind}-value`;
    valueInput.autocomplete = "new-password";
    valueInput.spellcheck = false;
    if (stored) valueInput.placeholder = "stored";
    valueInput.setAttribute("aria-describedby", "secrets-rule");
    valueField.append(valueLabel, valueInput);
    const drop = button("drop small secondary", "Remove", `Remove ${kind === "header" ? "header" : "variable"} ${name || "row"}`, () => {
      const list = row.parentNode;
      row.remove();
      const rest = list.querySelectorAll(`.${kind}-row`);
      (rest.length ? rest[rest.length - 1].querySelector("input") : $(kind === "header" ? "f-add-header" : "f-add-env")).focus();
    });
    row.append(nameField, valueField, drop);
    return row;
  }

  function setTransport(kind) {
    $("f-transport").value = kind === "stdio" ? "stdio" : "http";
    const http = $("f-transport").value === "http";
    document.querySelector("#view-form .for-http").hidden = !http;
    document.querySelector("#view-form .for-stdio").hidden = http;
  }

  function openForm(route) {
    const editing = route.mode === "edit";
    if (editing && !loaded) return; // filled once the first poll answered (see poll)
    $("server-form").reset();
    $("form-error").hidden = true;
    setText($("form-error"), "");
    form.mode = route.mode;
    form.name = route.name || null;
    form.nameTyped = editing;
    form.guessSeq += 1;
    for (const row of document.querySelectorAll("#f-headers .header-row, #f-env .env-row")) row.remove();
    setText($("f-target-hint"), "");
    $("f-target-hint").className = "hint";
    delete $("f-target-hint").dataset.guessed;
    $("f-target-hint").append("An ", element("code", "", "https://"), " URL for a remote server, or the command that starts a local one, e.g. ",
                              element("code", "", "npx -y @modelcontextprotocol/server-everything"), ".");
    $("f-name").readOnly = editing;
    $("f-transport").disabled = editing;
    setText($("f-transport-hint"), editing ? "To change it, remove the server and add it again." : "Guessed from the target.");
    setText($("f-name-hint"), editing ? "A server's name does not change." : "Letters, digits, - or _; suggested from the target.");
    setText($("form-title"), editing ? `Edit ${route.name}` : "Add a server");
    setText($("f-save"), editing ? "Save" : "Add");
    $("f-bearer").placeholder = "";
    $("f-client-secret").placeholder = "";
    form.storedHeaders = [];
    form.storedEnv = [];
    form.clientId = "";
    if (!editing) {
      setTransport("http");
      $("f-enabled").checked = true;
      return;
    }
    const server = serverOf(route.name);
    if (!server) {
      say(`No server named ${route.name} is configured.`, true);
      go("#/servers");
      return;
    }
    const entry = entryOf(server);
    setTransport(server.transport);
    $("f-name").value = server.name;
    // The target as the entry spells it (a variable it names stays unexpanded).
    if (entry && server.transport === "http" && typeof entry.url === "string") $("f-target").value = entry.url;
    else if (entry && typeof entry.command === "string") {
      $("f-target").value = [entry.command, ...(Array.isArray(entry.args) ? entry.args.map(text) : [])].map(shellQuote).join(" ");
    } else $("f-target").value = text(server.target);
    form.target = $("f-target").value;
    $("f-enabled").checked = server.enabled !== false;
    const stored = Array.isArray(server.credentials) ? server.credentials.map(text) : [];
    if (stored.includes("bearer token")) $("f-bearer").placeholder = "stored";
    for (const item of stored) {
      if (item.startsWith("header ")) {
        form.storedHeaders.push(item.slice(7));
        $("f-headers").append(pairRow("header", item.slice(7), true));
      } else if (item.startsWith("env ")) {
        form.storedEnv.push(item.slice(4));
        $("f-env").append(pairRow("env", item.slice(4), true));
      }
    }
    const client = auth(server).client;
    if (client && client.kind === "configured" && typeof client.id === "string") {
      form.clientId = client.id;
      $("f-client-id").value = client.id;
      $("f-client-secret").placeholder = "stored, if one was given";
    }
    if (!entry) {
      show(setText($("form-error"), NO_ENTRY(route.name)), true);
    }
  }

  // One word of a command line, quoted as Python's shlex.quote quotes it.
  function shellQuote(word) {
    if (word === "") return "''";
    return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : "'" + word.replace(/'/g, "'\"'\"'") + "'";
  }

  // A command line split as a POSIX shell would (quotes and backslashes), for stdio targets.
  function splitCommand(line) {
    const words = [];
    let word = "";
    let inWord = false;
    let quote = null;
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quote === "'") {
        if (c === "'") quote = null;
        else word += c;
      } else if (quote === '"') {
        if (c === '"') quote = null;
        else if (c === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) word += line[++i];
        else word += c;
      } else if (c === "'" || c === '"') {
        quote = c;
        inWord = true;
      } else if (c === "\\" && i + 1 < line.length) {
        word += line[++i];
        inWord = true;
      } else if (/\s/.test(c)) {
        if (inWord) words.push(word);
        word = "";
        inWord = false;
      } else {
        word += c;
        inWord = true;
      }
    }
    if (quote) throw new ApiError("The command line has an unclosed quote.");
    if (inWord) words.push(word);
    return words;
  }

  function secretValue(value) {
    return value === "-" ? null : value;
  }

  function collectPairs(kind, storedNames, errors) {
    const out = {};
    const kept = new Set();
    for (const row of document.querySelectorAll(`#f-${kind === "header" ? "headers" : "env"} .${kind}-row`)) {
      const name = row.querySelector(`.${kind}-name`).value.trim();
      const value = row.querySelector(`.${kind}-value`).value;
      const stored = row.dataset.stored || null;
      const same = (a, b) => (kind === "header" ? a.toLowerCase() === b.toLowerCase() : a === b);
      if (!name && !value) {
        continue; // an empty row: nothing (a stored one left empty is removed below)
      }
      if (!name) {
        errors.push(kind === "header" ? "Give each header a name, or remove its row." : "Give each variable a name, or remove its row.");
        continue;
      }
      if (stored && same(stored, name)) {
        kept.add(stored);
        if (value) out[name] = secretValue(value);
        continue;
      }
      if (stored && !value && kind === "header") {
        kept.add(stored); // a rename: the stored value goes with it (its one stored header)
        out[name] = "";
        continue;
      }
      if (!value || value === "-") {
        errors.push(`Give ${name} a value.`);
        continue;
      }
      out[name] = value;
    }
    for (const name of storedNames) {
      if (!kept.has(name) && !Object.keys(out).some((k) => (kind === "header" ? k.toLowerCase() === name.toLowerCase() : k === name))) {
        out[name] = null; // its row was removed (or emptied)
      }
    }
    return out;
  }

  async function saveForm(ev) {
    ev.preventDefault();
    if (form.saving) return;
    const error = $("form-error");
    const fail = (message) => {
      show(setText(error, message), true);
      return false;
    };
    error.hidden = true;
    const editing = form.mode === "edit";
    const name = editing ? form.name : $("f-name").value.trim();
    const target = $("f-target").value.trim();
    const transport = $("f-transport").value;
    if (!target) return fail("Give the server's URL or command line.");
    if (!name) return fail("Give the server a name.");
    let entry;
    if (editing) {
      entry = entryOf(serverOf(name));
      if (!entry) return fail(NO_ENTRY(name));
    } else {
      entry = { type: transport };
    }
    if (editing && target === form.target) {
      // The target is unchanged: the entry's url, command and args stay as written.
    } else if (transport === "http") {
      if (!/^https?:\/\//i.test(target)) return fail(`server ${name}: an HTTP server's target is an http:// or https:// URL.`);
      entry.url = target;
    } else {
      let words;
      try {
        words = splitCommand(target);
      } catch (e) {
        return fail(e.message);
      }
      if (!words.length) return fail("Give the command that starts the server.");
      entry.command = words[0];
      if (words.length > 1) entry.args = words.slice(1);
      else delete entry.args;
    }
    if ($("f-enabled").checked) delete entry.enabled;
    else entry.enabled = false;
    const errors = [];
    const secrets = {};
    if (transport === "http") {
      const bearer = $("f-bearer").value;
      if (bearer) secrets.bearerToken = secretValue(bearer);
      const headers = collectPairs("header", form.storedHeaders, errors);
      if (Object.keys(headers).length) secrets.headers = headers;
      const id = $("f-client-id").value.trim();
      const secret = $("f-client-secret").value;
      if (id === "-") secrets.oauth_client = null;
      else if (id && (id !== form.clientId || secret)) secrets.oauth_client = { clientId: id, clientSecret: secretValue(secret) };
      else if (!id && secret) errors.push("Give the OAuth client's ID with its secret.");
    } else {
      const env = collectPairs("env", form.storedEnv, errors);
      if (Object.keys(env).length) secrets.env = env;
    }
    if (errors.length) return fail(errors[0]);
    const body = { servers: { [name]: entry } };
    if (Object.keys(secrets).length) body.secrets = { [name]: secrets };
    if (!editing) body.added = [name];
    form.saving = true;
    markBusy($("f-save"), true);
    const label = $("f-save").textContent;
    setText($("f-save"), entry.enabled === false ? "Saving…" : "Connecting…");
    say(entry.enabled === false ? `Saving ${name}…` : `Saving ${name}: connecting to it…`, false);
    try {
      await patch(body);
      clearSecrets();
      say(entry.enabled === false ? `${name} is saved (disabled).` : `${name} is saved: it connected.`, false);
      afterRender = focusInRow(name, "button.details");
      go("#/servers");
    } catch (e) {
      // 400 or 409: nothing was kept; the form stays as typed, with the reason.
      fail(failure(e, `Saving ${name} failed; nothing was saved.`));
      say("", false);
      error.focus();
    } finally {
      form.saving = false;
      markBusy($("f-save"), false);
      setText($("f-save"), label);
    }
  }

  function scheduleGuess(now) {
    if (form.mode !== "add") return;
    if (form.guessTimer !== null) clearTimeout(form.guessTimer);
    form.guessTimer = setTimeout(guess, now ? 0 : GUESS_DELAY_MS);
  }

  async function guess() {
    form.guessTimer = null;
    const target = $("f-target").value.trim();
    const seq = ++form.guessSeq;
    const hint = $("f-target-hint");
    if (!target) return;
    if (hint.dataset.guessed === target) return;
    try {
      const guessed = await api("POST", "/api/mcp/guess", { target });
      if (seq !== form.guessSeq || form.mode !== "add") return;
      hint.dataset.guessed = target;
      if (guessed && (guessed.transport === "http" || guessed.transport === "stdio")) setTransport(guessed.transport);
      if (!form.nameTyped && guessed && typeof guessed.name === "string") $("f-name").value = guessed.name;
      hint.className = "hint";
      setText(hint, guessed && guessed.transport === "stdio"
        ? `A local command (stdio): ${[guessed.command, ...(Array.isArray(guessed.args) ? guessed.args : [])].map(text).join(" ")}`
        : "A remote server (HTTP).");
    } catch (e) {
      if (seq !== form.guessSeq) return;
      if (e.missing) {
        // An older service: the transport from the target's look, no name suggested.
        setTransport(/^https?:\/\//i.test(target) ? "http" : "stdio");
        return;
      }
      hint.className = "hint error";
      setText(hint, failure(e, "The target could not be read."));
      delete hint.dataset.guessed;
    }
  }

  // -- import ---------------------------------------------------------------------------

  const imported = { previewed: false };

  function importBody(dryRun) {
    const inputs = {};
    for (const input of document.querySelectorAll("#import-inputs input[data-input]")) {
      if (input.value) inputs[input.dataset.input] = input.value;
    }
    return {
      text: $("import-text").value, kind: $("import-kind").value || null, dryRun,
      inputs, disabled: $("import-disabled").checked,
    };
  }

  function renderImport(answer, dryRun) {
    const servers = Array.isArray(answer.servers) ? answer.servers.filter((s) => s && typeof s.name === "string") : [];
    const list = $("import-list");
    list.replaceChildren();
    for (const server of servers) {
      const row = element("li", "row import-row");
      row.dataset.server = server.name;
      const head = element("div", "head");
      head.append(element("span", "name", server.name), element("span", "transport chip", text(server.transport)));
      const outcome = element("span", "outcome badge", text(server.outcome));
      paintState(outcome, text(server.outcome), text(server.outcome));
      outcome.dataset.tone = { ready: "info", imported: "good", refused: "bad", skipped: "off" }[server.outcome] || "info";
      const info = element("div", "info");
      const details = element("p", "details", oneLine(server.details));
      details.hidden = !server.details;
      info.append(head, element("p", "target", text(server.target)), details);
      const status = element("div", "status-col");
      status.append(outcome);
      if (server.state) status.append(element("p", "facts", `state: ${oneLine(server.state)}`));
      // A skipped server (its name is taken) is not a failure: its line is shown calmly.
      const error = element("p", server.outcome === "skipped" ? "error calm" : "error", server.error ? oneLine(server.error) : "");
      error.hidden = !server.error;
      row.append(info, status, error);
      list.append(row);
    }
    if (servers.length === 0) list.append(element("li", "empty", "No server found in it."));
    const wanted = Array.isArray(answer.inputs) ? answer.inputs.filter((i) => i && typeof i.id === "string") : [];
    const box = $("import-inputs");
    if (dryRun) {
      const typed = new Map([...box.querySelectorAll("input[data-input]")].map((n) => [n.dataset.input, n.value]));
      box.replaceChildren();
      if (wanted.length) {
        box.append(element("p", "pairs-title", "Values it asks for (stored as secrets, never written to extensions.json)"));
        for (const input of wanted) {
          const field = element("div", "field");
          const id = `import-input-${++toolIds}`;
          const label = element("label", "", input.description ? `${oneLine(input.description)} (${input.id})` : input.id);
          label.htmlFor = id;
          const node = document.createElement("input");
          node.type = "password";
          node.id = id;
          node.autocomplete = "new-password";
          node.dataset.input = input.id;
          node.value = typed.get(input.id) || "";
          field.append(label, node);
          box.append(field);
        }
      }
      box.hidden = wanted.length === 0;
    } else {
      box.hidden = true;
      clearSecrets();
    }
    const ready = servers.some((s) => s.outcome === "ready");
    $("import-go").hidden = !(dryRun && ready);
    setText($("import-result-title"), dryRun ? "What will be imported" : "What was imported");
    $("import-result").hidden = false;
  }

  async function runImport(dryRun) {
    const error = $("import-error");
    error.hidden = true;
    if (!$("import-text").value.trim()) {
      show(setText(error, "Paste a configuration first."), true);
      $("import-text").focus();
      return;
    }
    const from = dryRun ? $("import-preview") : $("import-go");
    if (from.getAttribute("aria-disabled") === "true") return;
    markBusy(from, true);
    const label = from.textContent;
    setText(from, dryRun ? "Reading…" : "Importing…");
    try {
      const answer = await api("POST", "/api/mcp/import", importBody(dryRun));
      renderImport(answer || {}, dryRun);
      if (!dryRun) {
        const count = typeof answer.imported === "number" ? answer.imported : 0;
        say(`${count} server${count === 1 ? " was" : "s were"} imported.`, false);
        refreshSoon();
      } else {
        say("", false);
      }
      $("import-result-title").focus();
    } catch (e) {
      show(setText(error, e.missing ? OLDER_SERVICE : failure(e, "The import failed.")), true);
      error.focus();
      if (dryRun) $("import-result").hidden = true;
    } finally {
      markBusy(from, false);
      setText(from, label);
    }
  }

  // -- polling ------------------------------------------------------------------------

  async function poll() {
    timer = null;
    if (stopped) return;
    try {
      await pollSignIns();
      const body = await api("GET", "/api/mcp");
      take(body);
      const first = !loaded;
      loaded = true;
      if (pollFailed || $("status").textContent === "Loading…") say("", false);
      pollFailed = false;
      if (first && current.view === "form" && current.mode === "edit") openForm(current);
      renderLists();
    } catch (e) {
      pollFailed = true;
      say(failure(e, "The page could not read the settings."), true);
    } finally {
      if (timer === null && !stopped) timer = setTimeout(poll, POLL_MS);
    }
  }

  function refreshSoon() {
    if (stopped) return;
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, 0);
  }

  // -- start ------------------------------------------------------------------------------

  function wire() {
    $("page-sign-out").addEventListener("click", signOutOfPage);
    // A link, Back or Forward: route once per change of the hash.
    const followed = () => {
      if (window.location.hash !== routed) route(true);
    };
    window.addEventListener("hashchange", followed);
    window.addEventListener("popstate", followed);
    $("server-check").addEventListener("click", (ev) => check(current.name, ev.currentTarget));
    document.querySelector("#server-actions .edit").addEventListener("click", () => go(viewHref("edit", current.name)));
    document.querySelector("#server-actions .remove").addEventListener("click", (ev) => remove(current.name, ev.currentTarget));
    $("server-form").addEventListener("submit", saveForm);
    $("mcp-on").addEventListener("click", (ev) => turnMcpOn(ev.currentTarget));
    $("f-cancel").addEventListener("click", () => {
      clearSecrets();
      if (history.length > 1 && form.mode === "edit") history.back();
      else go("#/servers");
    });
    $("f-target").addEventListener("input", () => scheduleGuess(false));
    $("f-target").addEventListener("blur", () => scheduleGuess(true));
    $("f-name").addEventListener("input", () => {
      form.nameTyped = $("f-name").value.trim() !== "";
    });
    $("f-transport").addEventListener("change", () => setTransport($("f-transport").value));
    $("f-add-header").addEventListener("click", () => {
      const row = pairRow("header", "", false);
      $("f-headers").append(row);
      row.querySelector("input").focus();
    });
    $("f-add-env").addEventListener("click", () => {
      const row = pairRow("env", "", false);
      $("f-env").append(row);
      row.querySelector("input").focus();
    });
    $("import-preview").addEventListener("click", () => runImport(true));
    $("import-go").addEventListener("click", () => runImport(false));
    for (const id of ["import-text", "import-kind", "import-disabled"]) {
      $(id).addEventListener("input", () => {
        if (!$("import-result").hidden && $("import-go").hidden === false) $("import-go").hidden = true; // preview again first
      });
    }
  }

  async function start() {
    wire();
    try {
      await openSession();
    } catch (e) {
      stopped = true;
      closed();
      say(failure(e, NOT_OPENED), true);
      return;
    }
    $("page-sign-out").hidden = false;
    $("nav").hidden = false;
    route(false);
    poll();
  }

  document.addEventListener("DOMContentLoaded", start);
})();

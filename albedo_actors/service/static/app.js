// The settings page: lists the configured servers and the "MCP sign-ins" section.
//
// It is opened with a single-use link, http://127.0.0.1:PORT/#open=SECRET: the secret
// is in the fragment, which the browser never sends to a server. The page takes it out
// of the address bar at once, trades it for a page session token (POST /api/session),
// keeps that token in sessionStorage (this tab and this origin, port included) and
// sends it as "Authorization: Bearer" with every request. No cookie is used. "Sign out
// of this page" ends the session; so does its expiry, or the service stopping.
//
// It polls GET /api/mcp every second. Everything the server sends is data: it reaches
// the page through textContent and attribute values only, never innerHTML, and a URL is
// used as a link only when it is http(s).
//
// Rows are kept per server name and updated in place, so a poll never takes the
// keyboard focus away from the button it is on.
"use strict";

(function () {
  const POLL_MS = 1000;
  const TOKEN_KEY = "albedo-page-token";
  const NOT_OPENED = "This page is not open: run `albedo-mcp open` and follow the link it prints (each link works once).";
  const SIGNED_OUT = "Signed out of this page. Run `albedo-mcp open` to open it again.";

  // name -> {url, state, reason}: the sign-ins this page started (until it is reloaded).
  const signIns = new Map();
  const busy = new Set(); // names with an action in flight
  let latest = []; // the servers of the last GET /api/mcp
  let timer = null;
  let pollFailed = false; // the last poll failed: its message is on the status line
  let token = null; // this page's session token
  let stopped = false; // signed out or never opened: no more polling

  const $ = (id) => document.getElementById(id);

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
    if (hash) {
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
    render();
    closed();
    say(SIGNED_OUT, false);
  }

  function closed() {
    // Nothing of the settings stays on a page that is no longer open.
    $("page-sign-out").hidden = true;
    document.querySelector("main").hidden = true;
  }

  // -- the API ------------------------------------------------------------------------

  class ApiError extends Error {}

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
      throw new ApiError("This page's session has ended (it expired, or the service restarted): run `albedo-mcp open` for a new link.");
    }
    if (!response.ok) {
      const error = data && typeof data.error === "string" ? data.error : `the service answered HTTP ${response.status}`;
      throw new ApiError(oneLine(error));
    }
    return data;
  }

  const loginPath = (name) => `/api/auth/logins/${encodeURIComponent("mcp:" + name)}`;

  // -- what a server's state means here -------------------------------------------------

  function auth(server) {
    return server && typeof server.auth === "object" && server.auth !== null ? server.auth : {};
  }

  function needsSignIn(server) {
    const a = auth(server);
    return a.state === "needs_sign_in" || a.state === "signed_out" || Boolean(a.step_up);
  }

  function signedIn(server) {
    return auth(server).state === "signed_in";
  }

  function stateText(server) {
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

  function stateClass(server) {
    const a = auth(server);
    if (a.state === "signed_in" && !a.step_up) return "state good";
    if (needsSignIn(server)) return "state needs";
    return "state";
  }

  // -- rendering ----------------------------------------------------------------------

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

  function makeRow(name, withSignIn) {
    const row = element("li", "row");
    row.dataset.server = name;
    row.append(element("span", "name", name));
    const facts = element("span", "facts");
    facts.append(element("span", "transport"), document.createTextNode(" · "), element("span", "state"));
    row.append(facts);
    const actions = element("div", "actions");
    if (withSignIn) {
      const signIn = element("button", "sign-in", "Sign in");
      signIn.type = "button";
      signIn.setAttribute("aria-label", `Sign in to ${name}`);
      signIn.addEventListener("click", () => startSignIn(name));
      const cancel = element("button", "cancel", "Cancel");
      cancel.type = "button";
      cancel.setAttribute("aria-label", `Cancel the sign-in to ${name}`);
      cancel.addEventListener("click", () => cancelSignIn(name));
      actions.append(signIn, cancel);
    }
    const signOut = element("button", "sign-out", "Sign out");
    signOut.type = "button";
    signOut.setAttribute("aria-label", `Sign out of ${name}`);
    signOut.addEventListener("click", () => signOutOf(name));
    actions.append(signOut);
    row.append(actions);
    const detail = element("p", "detail");
    row.append(detail);
    return row;
  }

  function updateRow(row, server, inSignIns) {
    const name = server.name;
    const mine = signIns.get(name);
    row.querySelector(".transport").textContent = text(server.transport);
    const state = row.querySelector(".state");
    state.textContent = stateText(server);
    state.className = mine && mine.state === "failed" ? "state bad" : stateClass(server);
    const pending = Boolean(mine && mine.state === "pending");
    const signIn = row.querySelector("button.sign-in");
    const cancel = row.querySelector("button.cancel");
    const signOut = row.querySelector("button.sign-out");
    if (signIn) {
      signIn.hidden = pending || !needsSignIn(server);
      signIn.disabled = busy.has(name);
    }
    if (cancel) cancel.hidden = !pending;
    signOut.hidden = pending || !signedIn(server);
    signOut.disabled = busy.has(name);

    const detail = row.querySelector(".detail");
    const parts = [];
    if (inSignIns && mine && mine.state === "pending" && mine.url) {
      const link = element("a", "authorization-link", "Open the authorization page");
      link.href = mine.url;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      parts.push(link, document.createTextNode(" (it opened in a new tab; finish signing in there)"));
    } else if (inSignIns && mine && (mine.state === "failed" || mine.state === "cancelled") && mine.reason) {
      parts.push(element("span", "error", `The sign-in ${mine.state === "failed" ? "failed" : "was cancelled"}: ${oneLine(mine.reason)}`));
    } else if (needsSignIn(server) && auth(server).reason) {
      parts.push(element("span", "reason", oneLine(auth(server).reason)));
    }
    if (!inSignIns && typeof server.problem === "string" && server.problem) {
      // Its stored credentials cannot be read: the store's line says what to do.
      parts.push(element("span", "error problem", oneLine(server.problem)));
    }
    if (auth(server).step_up && inSignIns) {
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

  function renderList(list, empty, servers, inSignIns) {
    const rows = new Map();
    for (const row of list.children) rows.set(row.dataset.server, row);
    const wanted = new Set(servers.map((s) => s.name));
    for (const [name, row] of rows) if (!wanted.has(name)) row.remove();
    let previous = null;
    for (const server of servers) {
      let row = rows.get(server.name);
      if (!row) row = makeRow(server.name, inSignIns);
      updateRow(row, server, inSignIns);
      const next = previous ? previous.nextSibling : list.firstChild;
      if (row !== next) list.insertBefore(row, next);
      previous = row;
    }
    empty.hidden = servers.length > 0;
  }

  function render() {
    const servers = latest.filter((s) => s && typeof s.name === "string");
    // The section lists the servers that asked for a sign-in, and keeps those this
    // page is signing in or signed in, so a row does not vanish under its user.
    const asked = servers.filter((s) => needsSignIn(s) || signIns.has(s.name));
    renderList($("sign-ins-list"), $("sign-ins-empty"), asked, true);
    renderList($("servers-list"), $("servers-empty"), servers, false);
  }

  function say(message, isError) {
    const status = $("status");
    status.textContent = message;
    status.className = isError ? "status error" : "status";
  }

  // -- actions ------------------------------------------------------------------------

  async function startSignIn(name) {
    if (busy.has(name)) return;
    busy.add(name);
    render();
    try {
      const started = await api("PUT", loginPath(name), {});
      if (started && typeof started.state === "string" && started.state !== "pending") {
        // Ended at once (a client credentials sign-in needs no browser).
        signIns.set(name, { url: null, state: started.state, reason: started.reason ? oneLine(started.reason) : null });
        say(started.state === "signed_in" ? `Signed in to ${name}.` : `The sign-in to ${name} ${started.state}.`, started.state !== "signed_in");
        return;
      }
      const url = httpUrl(started && started.authorizationUrl);
      if (!url) throw new ApiError(`server ${name}: the service gave no usable authorization URL`);
      signIns.set(name, { url, state: "pending", reason: null });
      // A new tab for the authorization page; noopener: that page gets no handle on this one.
      window.open(url, "_blank", "noopener,noreferrer");
      say(`Signing in to ${name}: finish in the new tab, or use the link below.`, false);
    } catch (e) {
      say(e instanceof ApiError ? e.message : `Signing in to ${name} failed.`, true);
    } finally {
      busy.delete(name);
      render();
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
    } catch (e) {
      say(e instanceof ApiError ? e.message : `Cancelling the sign-in to ${name} failed.`, true);
    } finally {
      busy.delete(name);
      refreshSoon();
    }
  }

  async function signOutOf(name) {
    if (busy.has(name)) return;
    busy.add(name);
    render();
    try {
      const body = await api("PATCH", "/api/mcp", { secrets: { [name]: { oauth: null } } });
      signIns.delete(name);
      if (body && Array.isArray(body.servers)) latest = body.servers;
      say(`Signed out of ${name}.`, false);
    } catch (e) {
      say(e instanceof ApiError ? e.message : `Signing out of ${name} failed.`, true);
    } finally {
      busy.delete(name);
      render();
    }
  }

  // -- polling ------------------------------------------------------------------------

  async function poll() {
    timer = null;
    if (stopped) return;
    try {
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
          if (status.state === "signed_in") say(`Signed in to ${name}.`, false);
          else if (status.state === "failed") say(`The sign-in to ${name} failed${mine.reason ? ": " + mine.reason : "."}`, true);
        }
      }
      const body = await api("GET", "/api/mcp");
      latest = body && Array.isArray(body.servers) ? body.servers : [];
      if (pollFailed || $("status").textContent === "Loading…") say("", false);
      pollFailed = false;
      render();
    } catch (e) {
      pollFailed = true;
      say(e instanceof ApiError ? e.message : "The page could not read the settings.", true);
    } finally {
      if (timer === null && !stopped) timer = setTimeout(poll, POLL_MS);
    }
  }

  function refreshSoon() {
    if (stopped) return;
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, 0);
  }

  async function start() {
    $("page-sign-out").addEventListener("click", signOutOfPage);
    try {
      await openSession();
    } catch (e) {
      stopped = true;
      closed();
      say(e instanceof ApiError ? e.message : NOT_OPENED, true);
      return;
    }
    $("page-sign-out").hidden = false;
    poll();
  }

  document.addEventListener("DOMContentLoaded", start);
})();

// agentlog serve: what every page shares. Stored values are untrusted: they
// only ever become text nodes (textContent), never HTML.
"use strict";

const AL = (() => {
  // Bidirectional controls can reorder what a reader sees: shown by name.
  const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
  const LONG = 4000;

  function clean(value) {
    return String(value).replace(BIDI, (c) =>
      "\u27e6U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e7");
  }

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else if (key === "onclick") node.addEventListener("click", value);
      else node[key] = value;
    }
    for (const kid of kids) {
      if (kid === null || kid === undefined) continue;
      node.append(typeof kid === "string" ? document.createTextNode(clean(kid)) : kid);
    }
    return node;
  }

  // A long text, cut at LONG characters with a button that shows it all.
  function long(text, tag) {
    text = String(text);
    const node = el(tag || "div", { class: "text" });
    if (text.length <= LONG) {
      node.textContent = clean(text);
      return node;
    }
    node.textContent = clean(text.slice(0, LONG));
    const more = el("button", {
      class: "more",
      onclick: () => { node.textContent = clean(text); },
    }, "show all (" + text.length.toLocaleString() + " characters)");
    node.append(el("span", { class: "muted" }, " … "), more);
    return node;
  }

  function json(value) {
    let text;
    try { text = JSON.stringify(value, null, 2); } catch (e) { text = String(e); }
    return long(text === undefined ? "undefined" : text, "pre");
  }

  function query() { return new URLSearchParams(location.search); }

  function tenant() { return query().get("tenant") || ""; }

  function url(path, params) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value !== null && value !== undefined && value !== "") search.set(key, String(value));
    }
    const text = search.toString();
    return text ? path + "?" + text : path;
  }

  async function api(path, params) {
    const response = await fetch(url(path, params), { headers: { accept: "application/json" } });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  async function post(path, params, body, csrf) {
    const response = await fetch(url(path, params), {
      method: "POST",
      headers: { "content-type": "application/json", "x-agentlog-csrf": csrf },
      body: JSON.stringify(body),
    });
    const found = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(found.error || response.statusText);
    return found;
  }

  function when(ts) {
    return new Date(ts * 1000).toLocaleString();
  }

  function sessionLink(id, tenantName, label) {
    return el("a", { class: "sid", href: url("/session", { id: id, tenant: tenantName }) },
      label === undefined ? id : label);
  }

  // The header: the store, the pages, and the tenant switcher.
  let config = null;
  async function header() {
    config = await api("/api/config");
    const bar = document.getElementById("bar");
    const current = tenant() || config.tenant;
    const nav = el("nav", {},
      el("a", { href: url("/", { tenant: tenant() }) }, "Sessions"),
      config.has_stores ? el("a", { href: url("/stores", { tenant: tenant() }) }, "Stores") : null,
      el("a", { href: "/health" }, "Health"));
    const pick = el("select", { id: "tenant", title: "tenant" });
    for (const name of config.tenants) {
      pick.append(el("option", { value: name, selected: name === current }, name));
    }
    pick.addEventListener("change", () => {
      const search = query();
      search.set("tenant", pick.value);
      if (document.body.dataset.page === "session") location.href = url("/", { tenant: pick.value });
      else location.search = search.toString();
    });
    bar.replaceChildren(...[
      el("span", { class: "brand" }, "agentlog"),
      el("span", { class: "store muted" }, config.store),
      nav,
      config.kind === "files" ? null : el("label", {}, "tenant ", pick),
      config.allow_writes ? el("span", { class: "writes" }, "writes allowed") : null,
    ].filter(Boolean));
    return config;
  }

  function fail(error) {
    const main = document.getElementById("main");
    main.replaceChildren(el("p", { class: "error" }, String(error.message || error)));
  }

  function show(...nodes) {
    document.getElementById("main").replaceChildren(...nodes.filter(Boolean));
  }

  return { api, clean, el, fail, header, json, long, post, query, sessionLink, show, tenant, url, when };
})();

// The session page: the folded transcript, paged back from the end, live.
"use strict";

(async () => {
  const { api, el, json, long, url } = AL;
  const BOOKKEEPING = new Set(["tool_started", "file_snapshot", "permission_decision",
    "artifact_verified", "context_view"]);
  const PAGE = 200;
  let config;
  try { config = await AL.header(); } catch (e) { AL.fail(e); return; }
  const id = AL.query().get("id") || "";
  const tenant = AL.tenant();
  const base = "/api/sessions/" + encodeURIComponent(id);
  let info;
  try { info = await api(base, { tenant }); } catch (e) { AL.fail(e); return; }

  const list = el("ol", { id: "events", class: "events" });
  const earlier = el("button", { id: "earlier", hidden: true }, "earlier events");
  const banner = el("div", { id: "banner", class: "banner", hidden: true });
  const headNode = el("span", { id: "head" }, String(info.head));
  const meta = info.title === null ? null : el("p", { class: "title" }, info.title);
  AL.show(
    el("h1", {}, "Session ", el("code", {}, id)),
    meta,
    el("p", { class: "muted" }, "head ", headNode, " · ",
      el("span", { class: "live", id: "live" }, "live"),
      config.allow_writes ? " · writes allowed" : ""),
    el("div", { id: "lineage" }),
    banner, earlier, list);

  const calls = new Map();   // tool_use id -> its call element
  const results = new Map(); // tool_use id -> a result whose call is not loaded yet
  let first = null;          // the seq of the first event shown
  let last = 0;              // the seq of the last event shown

  function attach(call, result) {
    const box = call.querySelector(".result");
    box.replaceChildren(el("span", { class: "label" }, "result (seq " + result.seq + ")"),
      content(result.event.content));
    call.classList.remove("pending");
    call.classList.add(result.event.is_error ? "failed" : "answered");
    call.querySelector(".state").textContent = result.event.is_error ? "error" : "done";
  }

  function toolCall(block) {
    const call = el("div", { class: "call pending", "data-call": String(block.id) },
      el("div", { class: "callhead" }, el("span", { class: "tool" }, String(block.name)),
        el("span", { class: "state" }, "pending")),
      json(block.input === undefined ? {} : block.input),
      el("div", { class: "result" }));
    calls.set(block.id, call);
    const waiting = results.get(block.id);
    if (waiting) { attach(call, waiting); results.delete(block.id); }
    return call;
  }

  function content(value) {
    if (typeof value === "string") return long(value);
    if (!Array.isArray(value)) return json(value);
    const box = el("div", { class: "blocks" });
    for (const block of value) {
      if (block && typeof block === "object" && typeof block.text === "string") box.append(long(block.text));
      else if (block && block.type === "tool_use") box.append(toolCall(block));
      else box.append(json(block));
    }
    return box;
  }

  function body(stored) {
    const event = stored.event;
    const type = stored.type;
    if (type === "user" || type === "assistant") return content(event.content);
    if (type === "summary") {
      return el("div", { class: "marker" }, el("span", { class: "label" },
        "summary: the context restarts here"), content(event.content));
    }
    if (type === "tool_result") {
      const call = calls.get(event.tool_use_id);
      if (call) {
        attach(call, stored);
        return el("span", { class: "muted" }, "result of ", String(event.tool_use_id),
          " (shown with its call)");
      }
      results.set(event.tool_use_id, stored);
      return el("div", {}, el("span", { class: "label" }, "result of ", String(event.tool_use_id),
        event.is_error ? " (error)" : ""), content(event.content));
    }
    return null;
  }

  function item(stored) {
    const type = stored.type;
    const node = el("li", { class: "event type-" + type, "data-seq": String(stored.seq) });
    const raw = el("div", { class: "raw", hidden: true });
    const rawButton = el("button", { class: "rawbutton", onclick: () => {
      if (!raw.hidden) { raw.hidden = true; return; }
      raw.replaceChildren(
        el("div", { class: "muted" }, "seq " + stored.seq + " · parent_seq " + stored.parent_seq +
          " · " + AL.when(stored.ts) + " (" + stored.ts + ")"),
        json(stored.event));
      raw.hidden = false;
    } }, "raw");
    const head = el("div", { class: "eventhead" },
      el("span", { class: "seq" }, String(stored.seq)),
      el("span", { class: "type" }, type),
      el("span", { class: "muted when" }, AL.when(stored.ts)),
      rawButton, ...writes(stored));
    if (BOOKKEEPING.has(type)) {
      const details = el("details", {}, el("summary", {}, head), json(stored.event));
      node.append(details, raw);
      return node;
    }
    node.append(head, body(stored) || json(stored.event), raw);
    if (type === "tool_result" && stored.event.is_error) node.classList.add("failed");
    return node;
  }

  function writes(stored) {
    if (!config.allow_writes) return [];
    const fork = el("button", { class: "write", onclick: async () => {
      const name = prompt("Fork events 1.." + stored.seq + " into a new session named:");
      if (!name) return;
      try {
        await AL.post(base + "/fork", { tenant }, { at: stored.seq, new_session_id: name }, config.csrf);
        location.href = url("/session", { id: name, tenant });
      } catch (e) { alert(e.message); }
    } }, "fork here");
    const cut = el("button", { class: "write", onclick: async () => {
      if (!confirm("Drop every event after seq " + stored.seq + "? This cannot be undone.")) return;
      try { await AL.post(base + "/truncate", { tenant }, { to: stored.seq }, config.csrf); }
      catch (e) { alert(e.message); }
    } }, "truncate here");
    return [fork, cut];
  }

  // A page past the server's byte budget ends early with next_after: the
  // rest of the range (up to seq end - 1) is fetched from there.
  async function range(params, end) {
    const found = await api(base + "/events", params);
    let next = found.next_after;
    while (next !== null && next !== undefined && (end === null || next < end - 1)) {
      const more = await api(base + "/events", { tenant, after: next, limit: end === null ? PAGE : Math.min(PAGE, end - 1 - next) });
      found.events.push(...more.events);
      next = more.events.length ? more.next_after : null;
    }
    return found;
  }

  async function loadEarlier() {
    if (first === null || first <= 1) return;
    earlier.disabled = true;
    const found = await range({ tenant, before: first, limit: PAGE }, first);
    const height = document.documentElement.scrollHeight;
    const nodes = found.events.map(item);
    list.prepend(...nodes);
    if (found.events.length) first = found.events[0].seq;
    window.scrollBy(0, document.documentElement.scrollHeight - height);
    earlier.hidden = first <= 1;
    earlier.disabled = false;
  }

  function append(stored) {
    if (stored.seq <= last) return;  // never shown twice
    list.append(item(stored));
    if (first === null) first = stored.seq;
    last = stored.seq;
    headNode.textContent = String(Math.max(last, Number(headNode.textContent)));
  }

  const opening = await range({ tenant, limit: PAGE }, null);
  for (const stored of opening.events) append(stored);
  if (first === null) first = opening.head + 1;
  earlier.hidden = first <= 1;
  earlier.addEventListener("click", () => loadEarlier().catch(AL.fail));
  window.scrollTo(0, document.documentElement.scrollHeight);
  // Scrolling to the top loads the page before.
  new IntersectionObserver((seen) => {
    if (seen.some((s) => s.isIntersecting) && !earlier.hidden && !earlier.disabled) {
      loadEarlier().catch(AL.fail);
    }
  }).observe(earlier);

  // The live tail: the browser resumes with Last-Event-ID after a drop.
  const stream = new EventSource(url(base + "/tail", { tenant, after: last }));
  const liveNode = document.getElementById("live");
  stream.addEventListener("open", () => { liveNode.classList.remove("off"); });
  stream.addEventListener("error", () => { liveNode.classList.add("off"); });
  stream.addEventListener("event", (message) => {
    const atEnd = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
    append(JSON.parse(message.data));
    if (atEnd) window.scrollTo(0, document.documentElement.scrollHeight);
  });
  stream.addEventListener("truncated", (message) => {
    stream.close();
    liveNode.classList.add("off");
    const { head, seq, rewritten } = JSON.parse(message.data);
    // Rewritten: truncated below seq and appended to again, so from some seq
    // at or below it what is shown is gone; else everything after head is.
    const from = rewritten ? 0 : head;
    banner.replaceChildren(rewritten
      ? "This session was truncated below seq " + seq + " and appended to again while you " +
        "were viewing it; what is shown may no longer be the session. "
      : "This session was truncated to seq " + head +
        " while you were viewing it; what is shown after that is gone. ",
      el("button", { id: "reload", onclick: () => location.reload() }, "reload"));
    banner.hidden = false;
    for (const node of list.querySelectorAll("li.event")) {
      if (Number(node.dataset.seq) > from) node.classList.add("gone");
    }
  });
  document.body.dataset.ready = "1";
  if (window.ALLineage) window.ALLineage(id, tenant, info);
})();

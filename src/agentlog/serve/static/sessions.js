// The sessions page: most recently active first, paged by cursor, live.
"use strict";

(async () => {
  const { api, el, url } = AL;
  let config;
  try { config = await AL.header(); } catch (e) { AL.fail(e); return; }
  const filter = el("input", {
    id: "filter", type: "search", placeholder: "filter by id, title or tag",
    value: AL.query().get("q") || "",
  });
  const rows = el("tbody", { id: "sessions" });
  const more = el("button", { id: "more", hidden: true }, "more sessions");
  const status = el("p", { class: "muted", id: "status" });
  AL.show(
    el("h1", {}, "Sessions"),
    el("div", { class: "tools" }, filter, el("span", { class: "live", id: "live" }, "live")),
    el("table", { class: "sessions" },
      el("thead", {}, el("tr", {}, el("th", {}, "session"), el("th", {}, "title · tags"),
        el("th", { class: "num" }, "head"), el("th", {}, "last active"))),
      rows),
    more, status);

  function row(s) {
    const tags = s.tags.map((t) => el("span", { class: "tag" }, t));
    return el("tr", { "data-id": s.id },
      el("td", {}, AL.sessionLink(s.id, AL.tenant())),
      el("td", {}, s.title === null ? "" : el("span", { class: "title" }, s.title), ...tags),
      el("td", { class: "num" }, String(s.head)),
      el("td", { class: "muted" }, AL.when(s.mtime)));
  }

  let cursor = null;
  let looked = 0;  // sessions the filter has looked at so far
  function note() {
    status.textContent = rows.children.length ? ""
      : !filter.value ? "No sessions."
      : cursor === null ? "No sessions match."
      : "No match among the " + looked + " most recently active sessions looked at.";
  }

  async function load(reset) {
    const found = await api("/api/sessions", {
      tenant: AL.tenant(), q: filter.value, cursor: reset ? null : cursor, limit: 50,
    });
    if (reset) { rows.replaceChildren(); looked = 0; }
    for (const s of found.sessions) rows.append(row(s));
    cursor = found.next_cursor;
    looked += found.scanned;
    more.hidden = cursor === null;
    // A filtered request looks at a bounded number of sessions: with a cursor
    // left, the button looks further.
    more.textContent = filter.value ? "search further" : "more sessions";
    note();
  }

  // The live first page: a session that moved comes to the top, a new one appears.
  let stream = null;
  function live() {
    if (stream) stream.close();
    stream = new EventSource(url("/api/sessions/stream", { tenant: AL.tenant(), q: filter.value }));
    stream.addEventListener("sessions", (message) => {
      const found = JSON.parse(message.data);
      const top = found.sessions.map(row);
      for (const node of top) {
        const old = [...rows.children].find((r) => r.dataset.id === node.dataset.id);
        if (old) old.remove();
      }
      rows.prepend(...top);
      if (cursor === null && found.next_cursor !== null && rows.children.length <= 50) {
        cursor = found.next_cursor;
        more.hidden = false;
      }
      note();
    });
  }

  let timer = null;
  filter.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const search = AL.query();
      if (filter.value) search.set("q", filter.value); else search.delete("q");
      history.replaceState(null, "", url("/", Object.fromEntries(search)));
      try { await load(true); live(); } catch (e) { AL.fail(e); }
    }, 200);
  });
  more.addEventListener("click", () => load(false).catch(AL.fail));
  try { await load(true); live(); } catch (e) { AL.fail(e); }
})();

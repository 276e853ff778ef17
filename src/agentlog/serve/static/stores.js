// The stores page: run checkpoints, memory, artifacts and SessionStore snapshots.
"use strict";

(async () => {
  const { api, el, json, url } = AL;
  try { await AL.header(); } catch (e) { AL.fail(e); return; }
  const tenant = AL.tenant();
  const out = el("div", { id: "store" });
  const input = el("input", { id: "key", type: "search" });
  const tabs = el("div", { class: "tabs" });
  AL.show(el("h1", {}, "Stores"), tabs, el("div", { class: "tools" }, input), out);

  function table(headers, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) =>
        el("td", {}, typeof c === "string" ? c : c))))));
  }

  const views = {
    checkpoints: {
      hint: "session id (optional)",
      async show(key) {
        const found = await api("/api/stores/checkpoints", { tenant, session_id: key });
        return table(["run", "status", "session", "interruption", "side effects", "revision"],
          found.checkpoints.map((c) => [c.run_id, c.status, c.session_id || "",
            c.interruption === null ? "" : json(c.interruption),
            el("ul", {}, ...c.side_effects.map((s) =>
              el("li", { class: "effect-" + s.state }, s.kind + " " + s.id + ": " + s.state))),
            String(c.revision)]));
      },
    },
    memory: {
      hint: "namespace",
      async show(key) {
        if (!key) return el("p", { class: "muted" }, "Name a namespace to list its keys.");
        const found = await api("/api/stores/memory", { tenant, namespace: key });
        return table(["key", "value", "revision", "updated"],
          found.records.map((r) => [r.key, json(r.value), String(r.revision), AL.when(r.updated_at)]));
      },
    },
    artifacts: {
      hint: "",
      async show() {
        const found = await api("/api/stores/artifacts", { tenant });
        return table(["artifact", "media type", "size", "sha256", ""],
          found.artifacts.map((a) => [a.artifact_id, a.media_type, String(a.size), a.sha256,
            el("a", { href: url("/api/stores/artifacts/" + encodeURIComponent(a.artifact_id) +
              "/download", { tenant }), download: "" }, "download")]));
      },
    },
    sessions: {
      hint: "",
      async show() {
        const found = await api("/api/stores/sessions", { tenant });
        const loaded = el("div", { id: "snapshot" });
        // A session's newest snapshot (its state) and what came after it, on
        // demand; as with the tabs, only the last session asked for is shown.
        let opened = 0;
        const open = (id) => {
          const mine = ++opened;
          const show = (...nodes) => { if (mine === opened) loaded.replaceChildren(...nodes); };
          return api("/api/stores/sessions/" + encodeURIComponent(id), { tenant })
            .then((s) => show(el("h2", {}, "Session ", el("code", {}, id)),
              el("p", { class: "muted" }, s.snapshot === null ? "no snapshot"
                : "snapshot through item " + s.snapshot.through_sequence + " · " + s.items_after_snapshot +
                  " items after it"), json(s.snapshot === null ? null : s.snapshot.state)))
            .catch((e) => show(el("p", { class: "error" }, e.message)));
        };
        return el("div", {}, table(["session", "head", "snapshot through", "revision", "metadata", ""],
          found.sessions.map((s) => [s.session_id, String(s.head),
            s.snapshot_through === null ? "" : String(s.snapshot_through), String(s.revision),
            json(s.metadata),
            el("button", { class: "open", onclick: () => open(s.session_id) }, "snapshot")])), loaded);
      },
    },
  };

  let current = AL.query().get("view") || "checkpoints";
  if (!views[current]) current = "checkpoints";
  let latest = 0;
  async function render() {
    // A slower answer for a tab left behind never paints over the one now chosen.
    const mine = ++latest;
    const view = views[current];
    const shown = current + ":" + input.value;
    input.placeholder = view.hint;
    input.hidden = !view.hint;
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.view === current);
    delete out.dataset.shown;
    let body;
    try { body = await view.show(input.value); }
    catch (e) { body = el("p", { class: "error" }, e.message); }
    if (mine !== latest) return;
    out.replaceChildren(body);
    out.dataset.shown = shown;  // what is on the page, for a reader (and a test) to wait on
  }
  for (const name of Object.keys(views)) {
    tabs.append(el("button", { "data-view": name, onclick: () => { current = name; input.value = ""; render(); } }, name));
  }
  input.addEventListener("change", render);
  render();
})();

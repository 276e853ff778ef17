// The health page: engine, integrity check (quick or deep), statistics.
"use strict";

(async () => {
  const { api, el, json } = AL;
  try { await AL.header(); } catch (e) { AL.fail(e); return; }
  const out = el("div", { id: "health" });
  const deep = el("button", { id: "deep" }, "run check --deep");
  AL.show(el("h1", {}, "Health"), deep, out);

  async function look(isDeep) {
    out.replaceChildren(el("p", { class: "muted" }, isDeep ? "Reading every event…" : "Checking…"));
    const found = await api("/api/health", { deep: isDeep ? "1" : "0" });
    const check = found.check;
    out.replaceChildren(
      el("h2", {}, "Engine"),
      el("p", {}, "engine ", el("code", {}, found.engine.engine), " · SQLite ",
        el("code", {}, found.engine.sqlite_version), " · store ", found.kind,
        found.schema_version === null ? "" : " · schema version ",
        found.schema_version === null ? null : el("code", { id: "schema" }, String(found.schema_version))),
      el("h2", {}, check.deep ? "check --deep" : "check"),
      el("p", { id: "check", class: check.ok ? "ok" : "error" }, check.ok ? "ok: " : "damaged: ",
        String(check.detail)),
      el("h2", {}, "stats"),
      found.stats === null ? el("p", { class: "muted" }, "a file store keeps no statistics") : json(found.stats),
      el("h2", {}, "figures"),
      el("div", { id: "figures" }, found.telemetry.figures === null
        ? el("p", { class: "muted" }, "this store keeps no monitoring figures") : json(found.telemetry.figures)),
      el("h2", {}, "metrics"),
      el("div", { id: "metrics" }, found.telemetry.metrics === null
        ? el("p", { class: "muted" }, "start agentlog serve with --metrics for /metrics and its figures here")
        : json(found.telemetry.metrics)));
  }
  deep.addEventListener("click", () => look(true).catch(AL.fail));
  try { await look(false); } catch (e) { AL.fail(e); }
})();

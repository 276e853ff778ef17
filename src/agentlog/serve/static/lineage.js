// The session page's fork lineage: where the session was forked from, its
// forks, and the tree of both — every session one click away. Session ids are
// untrusted text: they only ever become text nodes and URL parameters.
"use strict";

window.ALLineage = async (id, tenant) => {
  const { api, el, url } = AL;
  const box = document.getElementById("lineage");
  if (!box) return;
  let tree;
  try {
    tree = await api("/api/sessions/" + encodeURIComponent(id) + "/lineage", { tenant });
  } catch (e) {
    box.replaceChildren(el("p", { class: "error" }, "fork lineage: " + e.message));
    return;
  }

  // A session of the tree: a link, or its name alone once it is deleted.
  function name(node) {
    if (node.session_id === id) return el("span", { class: "sid here" }, node.session_id);
    if (!node.exists) return el("span", { class: "sid gone" }, node.session_id, " (deleted)");
    return AL.sessionLink(node.session_id, tenant);
  }

  // "at seq N of SOURCE": the fork point, a link to the source at that event.
  function forkPoint(node, source) {
    if (node.seq === null || source === null) return null;
    const label = "seq " + node.seq;
    const point = source.exists
      ? el("a", { class: "forkpoint", href: url("/session", { id: source.session_id, tenant }) +
          "#seq-" + node.seq }, label)
      : el("span", { class: "forkpoint" }, label);
    const behind = source.exists && source.head < node.seq ? " (since truncated below it)" : "";
    return el("span", { class: "muted" }, " forked at ", point, behind);
  }

  function branch(node, source) {
    const item = el("li", { "data-session": node.session_id }, name(node), forkPoint(node, source));
    const kids = node.forks || [];
    if (kids.length) {
      const list = el("ul", {});
      for (const kid of kids) list.append(branch(kid, node));
      item.append(list);
    }
    return item;
  }

  const here = { session_id: id, seq: tree.origin ? tree.origin.seq : null, head: tree.head,
    exists: tree.exists, forks: tree.forks };
  // The ancestors, oldest first, each holding the next; this session last.
  const chain = [...tree.ancestors, here];
  let top = null;
  let holder = null;
  for (let i = 0; i < chain.length; i++) {
    const node = chain[i];
    const item = i === chain.length - 1
      ? branch(node, i ? chain[i - 1] : null)
      : el("li", { "data-session": node.session_id }, name(node),
        forkPoint(node, i ? chain[i - 1] : null));
    if (holder === null) top = item; else holder.append(el("ul", {}, item));
    holder = item;
  }

  const origin = tree.origin
    ? el("p", { id: "origin" }, "Forked from ", name(tree.origin), forkPoint(tree.origin, tree.origin))
    : el("p", { id: "origin", class: "muted" }, "Not a fork (or forked before lineage was recorded).");
  const forks = tree.forks.length
    ? el("p", { id: "forks" }, "Forks: ", ...tree.forks.flatMap((fork, i) =>
      [i ? ", " : "", name(fork), el("span", { class: "muted" }, " at seq " + fork.seq)]))
    : el("p", { id: "forks", class: "muted" }, "No forks.");
  const shown = tree.ancestors.length || tree.forks.length;
  box.replaceChildren(
    origin, forks,
    shown ? el("details", { id: "forktree", class: "tree", open: true },
      el("summary", {}, "Fork tree"), el("ul", {}, top),
      tree.truncated ? el("p", { class: "muted" }, "(cut short: the tree is larger)") : null) : null);

  // A link "#seq-N" to this session: show that event (paging back to it).
  const wanted = /^#seq-(\d+)$/.exec(location.hash);
  if (wanted) {
    const seq = wanted[1];
    for (let tries = 0; tries < 100; tries++) {
      const node = document.querySelector('li.event[data-seq="' + seq + '"]');
      if (node) { node.classList.add("target"); node.scrollIntoView(); break; }
      const earlier = document.getElementById("earlier");
      if (!earlier || earlier.hidden) break;
      earlier.click();
      await new Promise((done) => setTimeout(done, 100));
    }
  }
  box.dataset.ready = "1";
};

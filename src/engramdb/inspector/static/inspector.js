// engramdb inspector: draws each page's charts from the JSON the server put in #page-data.
// No inline script (the Content-Security-Policy forbids it); no remote origin.
"use strict";

(function () {
  const page = document.body.dataset.page;
  const dataEl = document.getElementById("page-data");
  const data = dataEl ? JSON.parse(dataEl.textContent) : null;
  const palette = ["#2563eb", "#16a34a", "#f59e0b", "#db2777", "#7c3aed", "#0891b2", "#dc2626", "#65a30d"];
  const opts = { responsive: true, maintainAspectRatio: false, animation: false };

  function bar(id, labels, datasets, extra) {
    const el = document.getElementById(id);
    if (!el) return null;
    return new Chart(el, Object.assign({ type: "bar", data: { labels: labels, datasets: datasets }, options: opts }, extra || {}));
  }

  function doughnut(id, labels, values) {
    const el = document.getElementById(id);
    if (!el) return null;
    return new Chart(el, {
      type: "doughnut",
      data: { labels: labels, datasets: [{ data: values, backgroundColor: palette.slice(0, values.length) }] },
      options: opts,
    });
  }

  if (page === "memory" && data && data.labels.length) {
    const sets = Object.keys(data.series).map(function (ch, i) {
      return { label: ch, data: data.series[ch], backgroundColor: palette[i % palette.length] };
    });
    bar("timeline", data.labels, sets, {
      options: Object.assign({}, opts, { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } }),
    });
  }

  if (page === "recall" && data && data.hits.length) {
    const box = document.getElementById("scores-box");
    if (box) box.style.height = (80 + 34 * data.hits.length) + "px";
    const labels = data.hits.map(function (h) { return "#" + h.rank + " " + h.label; });
    const sets = data.parts.map(function (p, i) {
      return { label: p, data: data.hits.map(function (h) { return h.parts[p]; }), backgroundColor: palette[i % palette.length] };
    });
    bar("scores", labels, sets, {
      options: Object.assign({}, opts, {
        indexAxis: "y",
        scales: { x: { stacked: true, title: { display: true, text: "score = sum of weighted components" } }, y: { stacked: true } },
      }),
    });
  }

  if (page === "stats" && data) {
    const live = data.memories - data.archived;
    const never = Math.round(data.never_fetched_share * live);
    doughnut("never", ["fetched", "never fetched"], [live - never, never]);
    const top = data.fetch_concentration * 100;
    bar("concentration", ["top 10% of memories", "the other 90%"],
      [{ label: "share of deliberate reads (%)", data: [top, data.reads ? 100 - top : 0], backgroundColor: [palette[0], palette[2]] }],
      { options: Object.assign({}, opts, { scales: { y: { beginAtZero: true, max: 100, title: { display: true, text: "%" } } },
        plugins: { legend: { display: false } } }) });
    const used = data.injected_then_used * 100;
    bar("injected", ["injected, later used", "injected, never used"],
      [{ label: "share of injected memories (%)", data: [used, data.injected ? 100 - used : 0], backgroundColor: [palette[1], palette[3]] }],
      { options: Object.assign({}, opts, { scales: { y: { beginAtZero: true, max: 100, title: { display: true, text: "%" } } },
        plugins: { legend: { display: false } } }) });
    const types = Object.keys(data.by_type);
    doughnut("types", types, types.map(function (t) { return data.by_type[t]; }));
  }

  if (page === "graph") {
    const box = document.getElementById("graph");
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error("graph: " + r.status); return r.json(); })
      .then(function (g) {
        const cy = cytoscape({
          container: box,
          elements: g.elements,
          minZoom: 0.3,
          maxZoom: 1.4,  // a small neighbourhood would otherwise be blown up to fill the box
          layout: {
            name: "concentric", animate: false, padding: 40, minNodeSpacing: 140, startAngle: Math.PI / 6,
            concentric: function (n) { return 10 - n.data("level"); }, levelWidth: function () { return 1; },
          },
          style: [
            { selector: "node", style: { label: "data(label)", "font-size": 11, "text-wrap": "wrap", "text-max-width": 170,
              "text-valign": "bottom", "text-margin-y": 5, "background-color": "#2563eb", color: "#1d2330", width: 20, height: 20 } },
            { selector: "node[?root]", style: { "background-color": "#db2777", width: 28, height: 28, "font-weight": "bold" } },
            { selector: "edge", style: { label: "data(label)", "font-size": 10, "curve-style": "bezier", "target-arrow-shape": "triangle",
              width: 1.5, "line-color": "#9ca3af", "target-arrow-color": "#9ca3af", color: "#6b7280",
              "text-background-color": "#ffffff", "text-background-opacity": 1, "text-background-padding": 2 } },
          ],
        });
        cy.on("tap", "node", function (ev) { window.location.href = "/memory/" + encodeURIComponent(ev.target.id()); });
        box.dataset.ready = String(cy.nodes().length);
      })
      .catch(function (e) { console.error(e); });
  }
})();

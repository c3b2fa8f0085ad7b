// perfdag's results site: renders the page's data file (data/<page>.js, the same document as
// data/<page>.json) with plotly.js shipped beside it. No network: every file is the site's own.
(function () {
  "use strict";
  const page = document.body.dataset.page;
  const content = document.getElementById("content");
  const D = window.PERFDAG_DATA;

  function esc(s) {
    return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v !== "number") return esc(String(v));  // a string from a data file: never markup
    const a = Math.abs(v);
    if (Number.isInteger(v) || (a >= 100 && Number.isInteger(v))) return v.toLocaleString("en-US");
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    return a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  // A night's value with its evidence: median [interval of the median] (n repeats), or the one value.
  function spread(s) {
    if (!s) return "-";
    if (s.n > 1 && s.low !== null && s.low !== undefined)
      return `${fmt(s.median)} [${fmt(s.low)}, ${fmt(s.high)}] (n=${s.n})`;
    if (s.n > 1) return `${fmt(s.median)} (${fmt(s.min)}..${fmt(s.max)}, n=${s.n})`;
    return `${fmt(s.median)} (n=1, noise not measured)`;
  }
  function pct(r) { return r === null || r === undefined ? "" : ` (${r >= 0 ? "+" : ""}${(100 * r).toFixed(1)}%)`; }
  function table(head, rows, cls) {
    return `<table class="${cls || ""}"><thead><tr>${head.map(h => `<th>${h}</th>`).join("")}</tr></thead><tbody>` +
      rows.map(r => `<tr${r.cls ? ` class="${r.cls}"` : ""}>${r.cells.map(c => `<td>${c}</td>`).join("")}</tr>`).join("") +
      "</tbody></table>";
  }
  function obsLinks(obs) {
    return (obs || []).map(o => o.report
      ? `<a href="${esc(o.report)}" title="repeat ${o.repeat}: verified observation">${esc(o.ref)}</a>`
      : `<span class="refused" title="${esc(o.refused || "")}">${esc(o.ref || "none")} (refused: ${esc(o.refused || "")})</span>`).join("<br>");
  }
  function chart(parent, id, traces, layout) {
    const div = document.createElement("div");
    div.id = id;
    div.className = "chart";
    parent.appendChild(div);
    Plotly.newPlot(div, traces, Object.assign({margin: {t: 40, r: 20}, hovermode: "closest",
      legend: {orientation: "h", y: -0.25}}, layout), {displaylogo: false, responsive: true});
    div.on("plotly_click", ev => {  // a point that carries its report's link opens it
      const p = ev.points && ev.points[0];
      if (p && p.customdata && typeof p.customdata === "string") window.location.href = p.customdata;
    });
    return div;
  }
  function section(title) {
    const s = document.createElement("section");
    s.innerHTML = `<h2>${esc(title)}</h2>`;
    content.appendChild(s);
    return s;
  }
  function addHTML(parent, text) { parent.insertAdjacentHTML("beforeend", text); }

  const render = {
    overview() {
      if (!D.configurations.length) { addHTML(content, "<p>No nights in this root yet (Nightly writes them).</p>"); return; }
      const regressed = D.configurations.filter(c => c.regression).length;
      addHTML(content, `<p class="summary">${D.configurations.length} configuration(s); <strong>${regressed}</strong> regressed on their last night.</p>`);
      const rows = D.configurations.map(c => ({cls: c.regression ? "regression" : "", cells: [
        esc(c.sweep), esc(c.name), esc(c.scenario || "-"),
        `${esc(c.date)}<br><small>vs ${esc(c.compared_with || "nothing (first night)")}</small>`,
        `${esc(c.valid)} VALID <small>(LoadGen's verdict)</small>`, c.accuracy_passed === "not run" ? "not run" : `${esc(c.accuracy_passed)} PASS`,
        c.checks.filter(k => k.judged).map(k =>
          `<div class="check ${esc(String(k.verdict).replace(/ /g, "-"))}"><strong>${esc(k.label)}</strong> <small>(${esc(k.whose)}'s)</small>: ` +
          `${spread(k.now)}<br><small>previous ${spread(k.previous)}; change ${fmt(k.delta)}${pct(k.rel)}; ` +
          `<b>${esc(k.verdict)}</b>${typeof k.p === "number" ? `, p=${k.p.toFixed(3)}` : ""}` +
          `${k.why ? ": " + esc(k.why) : ""}</small></div>`).join("") || "-",
        c.reasons.length ? c.reasons.map(esc).join("<br>") : "none",
        obsLinks(c.observations)]}));
      addHTML(content, table(["sweep", "configuration", "scenario", "night", "valid", "accuracy",
        "judged metrics (median [interval of the median], repeats)", "regression reasons", "observations (reports)"], rows, "overview"));
    },

    trends() {
      if (!D.series.length) { addHTML(content, "<p>No nights in this root yet.</p>"); return; }
      D.series.forEach((s, i) => {
        const sec = section(`${s.sweep}: ${s.name} (${s.scenario || "-"})`);
        const marks = s.nights.filter(n => n.param_changes.length || n.code_changes.length);
        addHTML(sec, marks.length ? "<ul class=\"changes\">" + marks.map(n => `<li>${esc(n.date)}: ` +
          (n.param_changes.length ? "parameters " + n.param_changes.map(c => `<code>${esc(c.param)}</code> ${esc(fmt(c.previous))} &rarr; ${esc(fmt(c.now))}`).join(", ") : "") +
          (n.code_changes.length ? (n.param_changes.length ? "; " : "") + "code " + n.code_changes.map(c => `<code>${esc(c)}</code>`).join(", ") : "") +
          "</li>").join("") + "</ul>" : "<p>No parameter or code change between these nights.</p>");
        Object.entries(s.metrics).forEach(([key, m]) => {
          const pts = m.points;
          const shapes = marks.map(n => ({type: "line", xref: "x", yref: "paper", x0: n.date, x1: n.date, y0: 0, y1: 1,
            line: {dash: "dash", color: "#c60"}}));
          const notes = marks.map(n => ({x: n.date, y: 1, yref: "paper", showarrow: false, yanchor: "bottom",
            text: "changed", font: {color: "#c60", size: 10}}));
          const dots = {x: [], y: []};
          pts.forEach(p => (p.values || []).forEach(v => { dots.x.push(p.date); dots.y.push(v); }));
          chart(sec, `trend-${i}-${key}`, [
            {name: "median over the night's repeats", x: pts.map(p => p.date), y: pts.map(p => p.median), mode: "lines+markers",
             type: "scatter", customdata: pts.map(p => p.report),
             error_y: {type: "data", symmetric: false, array: pts.map(p => p.high !== null && p.high !== undefined ? p.high - p.median : 0),
                       arrayminus: pts.map(p => p.low !== null && p.low !== undefined ? p.median - p.low : 0)},
             text: pts.map(p => spread(p) + (p.report ? "<br>click: its report" : "")), hoverinfo: "x+text"},
            {name: "each repeat", x: dots.x, y: dots.y, mode: "markers", type: "scatter", marker: {size: 5, color: "#999"},
             hoverinfo: "x+y"}],
            {title: {text: `${m.label}, ${m.whose}'s` + (m.judged ? " (judged)" : ` (shown, not judged for ${s.scenario})`), font: {size: 14}}, shapes: shapes, annotations: notes,
             xaxis: {type: "category", title: {text: "night"}}, yaxis: {title: {text: `${m.label} (${m.whose}'s)`}}});
        });
        addHTML(sec, table(["night", "repeats", "valid", "observations (reports)"],
          s.nights.map(n => ({cells: [esc(n.date), fmt(n.repeats), esc(n.valid), obsLinks(n.observations)]}))));
      });
    },

    frontier() {
      if (!D.sweeps.length) { addHTML(content, "<p>No nights in this root yet.</p>"); return; }
      D.sweeps.forEach((s, i) => {
        const sec = section(`${s.sweep}: engines by ${s.engine_keys.join(", ") || "-"}, levels by ${s.level_key || "-"}`);
        if (!s.nights.length) return;
        const sel = document.createElement("select");
        sel.id = `night-${i}`;
        s.nights.forEach((n, j) => sel.add(new Option(n.date, j)));
        sel.value = s.nights.length - 1;
        const label = document.createElement("label");
        label.textContent = "night: ";
        label.appendChild(sel);
        sec.appendChild(label);
        const div = chart(sec, `frontier-${i}`, [], {});
        const tbl = document.createElement("div");
        sec.appendChild(tbl);
        function draw() {
          const n = s.nights[sel.value];
          const per = n.per;
          const yname = per === "GPU" ? "tokens_per_s_per_gpu" : "tokens_per_s";
          const engines = [...new Set(n.rows.map(r => r.engine))];
          const traces = engines.map(e => {
            const rs = n.rows.filter(r => r.engine === e).sort((a, b) => (a.concurrency || 0) - (b.concurrency || 0));
            return {name: e, x: rs.map(r => r.tokens_per_s_per_user), y: rs.map(r => r[yname]), mode: "lines+markers",
              type: "scatter", customdata: rs.map(r => ((r.observations || []).find(o => o.report) || {}).report || null),
              marker: {symbol: rs.map(r => r.valid ? "circle" : "x"), size: 10},
              text: rs.map(r => `concurrency ${fmt(r.concurrency)}; ${r.valid ? "VALID" : "INVALID"}` +
                (r.repeats ? `, ${r.repeats} repeats` : ", 1 repeat (noise not measured)") + (r.on_front ? "; on the Pareto front" : "")),
              hoverinfo: "x+y+text+name"};
          });
          const front = n.rows.filter(r => r.on_front).sort((a, b) => a.tokens_per_s_per_user - b.tokens_per_s_per_user);
          traces.push({name: "Pareto front (VALID points, by median)", x: front.map(r => r.tokens_per_s_per_user),
            y: front.map(r => r[yname]), mode: "lines+markers", type: "scatter", line: {dash: "dash", color: "black"},
            marker: {symbol: "circle-open", size: 16, color: "black"}, hoverinfo: "skip"});
          Plotly.react(div, traces, {title: {text: `${s.sweep}, night ${n.date}`, font: {size: 14}},
            xaxis: {title: {text: `tokens/s per user (1000 / TPOT p50, ${n.whose.tpot}'s)`}, rangemode: "tozero"},
            yaxis: {title: {text: `tokens/s per ${per}, LoadGen's` + (per === "system" ? " (no GPU serves)" : ` (${n.gpus} GPUs)`)}, rangemode: "tozero"},
            margin: {t: 40, r: 20}, legend: {orientation: "h", y: -0.25}, hovermode: "closest"});
          tbl.innerHTML = table(["engine", "concurrency", `tokens/s per user (${esc(n.whose.tpot)}'s)`, `tokens/s per ${per} (LoadGen's)`,
              "result (LoadGen's)", "front", "repeats", "cost per million tokens", "observations"],
            n.rows.map(r => ({cells: [esc(r.engine), fmt(r.concurrency), fmt(r.tokens_per_s_per_user), fmt(r[yname]),
              r.valid ? "VALID" : "INVALID", esc(r.front || "-"), r.repeats ? fmt(r.repeats) : "1 (noise not measured)",
              r.cost_per_million_tokens === null ? "-" : "$" + r.cost_per_million_tokens.toFixed(2), obsLinks(r.observations)]})));
        }
        sel.addEventListener("change", draw);
        draw();
      });
    },

    search() {
      if (!D.series.length) { addHTML(content, "<p>No searched point in these nights (a sweep with <code>search: true</code> makes them).</p>"); return; }
      const bySweep = {};
      D.series.forEach(s => (bySweep[s.sweep] = bySweep[s.sweep] || []).push(s));
      Object.entries(bySweep).forEach(([sweep, series], i) => {
        const sec = section(sweep);
        chart(sec, `search-${i}`, series.map(s => ({name: s.name, x: s.nights.map(n => n.date + (n.repeat > 1 ? ` r${n.repeat}` : "")),
          y: s.nights.map(n => n.max_load), mode: "lines+markers", type: "scatter",
          text: s.nights.map(n => `bracket ${JSON.stringify(n.bracket)}; tried (load, passed, runs) ${JSON.stringify(n.tried)}`),
          hoverinfo: "x+y+text+name"})),
          {title: {text: `max VALID load (${series[0].axis || "load"}), LoadGen's verdict at each probe`, font: {size: 14}},
           xaxis: {type: "category", title: {text: "night"}}, yaxis: {title: {text: series[0].axis || "load"}, rangemode: "tozero"}});
        addHTML(sec, table(["point", "night", "max VALID load", "bracket", "probes: load, runs passed / runs", "observation"],
          series.flatMap(s => s.nights.map(n => ({cells: [esc(s.name), esc(n.date), n.max_load === null ? "none found" : fmt(n.max_load),
            esc(JSON.stringify(n.bracket)), (n.tried || []).map(t => `${fmt(t[0])}: ${t[1]}/${t[2]}`).join(", "), esc(n.observation || "-")]})))));
      });
    },

    cost() {
      addHTML(content, `<p class="formula"><strong>Formula:</strong> ${esc(D.formula)}</p>`);
      if (D.no_price) addHTML(content, `<p class="note">${esc(D.no_price)}</p>`);
      else addHTML(content, `<p>Price: $${D.price_per_gpu_hour} per GPU-hour (per system-hour where no GPU serves).</p>`);
      addHTML(content, `<p class="note">${esc(D.no_power || "Power: the mean total GPU power NVML read over each measurement.")}</p>`);
      D.sweeps.forEach((s, i) => {
        const sec = section(s.sweep);
        const last = s.nights[s.nights.length - 1];
        if (!last) return;
        if (D.price_per_gpu_hour !== null) {
          const engines = [...new Set(last.points.map(p => p.engine))];
          chart(sec, `cost-${i}`, engines.map(e => {
            const ps = last.points.filter(p => p.engine === e && p.cost_per_million_tokens !== null);
            return {name: e, x: ps.map(p => p.tokens_per_s_per_user), y: ps.map(p => p.cost_per_million_tokens), mode: "markers",
              type: "scatter", marker: {symbol: ps.map(p => p.valid ? "circle" : "x"), size: 10},
              text: ps.map(p => `concurrency ${fmt(p.concurrency)}; ${p.valid ? "VALID" : "INVALID"}`), hoverinfo: "x+y+text+name"};
          }), {title: {text: `cost per million tokens, night ${last.date}`, font: {size: 14}},
            xaxis: {title: {text: "tokens/s per user (1000 / TPOT p50)"}, rangemode: "tozero"}, yaxis: {title: {text: "$ per million tokens"}, rangemode: "tozero"}});
        }
        addHTML(sec, table(["night", "engine", "concurrency", "tokens/s (LoadGen's)", "tokens/s per user", "result", "front",
            `$ per million tokens`, "power (W, NVML)", "tokens/s per kW"],
          s.nights.flatMap(n => n.points.map(p => ({cells: [esc(n.date), esc(p.engine), fmt(p.concurrency), fmt(p.tokens_per_s),
            fmt(p.tokens_per_s_per_user), p.valid ? "VALID" : "INVALID", esc(p.front || "-"),
            p.cost_per_million_tokens === null ? "-" : "$" + p.cost_per_million_tokens.toFixed(2),
            p.power_w === null ? "not measured" : fmt(p.power_w),
            p.tokens_per_s_per_kw === null ? "not measured" : fmt(p.tokens_per_s_per_kw)]})))));
      });
    },

    runs() {
      if (!D.runs.length) { addHTML(content, "<p>No run records in this root.</p>"); return; }
      const counts = {};
      D.runs.forEach(r => (counts[r.outcome] = (counts[r.outcome] || 0) + 1));
      addHTML(content, `<p class="summary">${D.runs.length} run(s): ` +
        Object.entries(counts).map(([k, v]) => `${v} ${esc(k)}`).join(", ") + "</p>");
      addHTML(content, table(["run", "started", "outcome", "built", "reused", "failed stages", "relaunches", "corrupt", "verdicts"],
        D.runs.map(r => ({cls: r.outcome === "ok" ? "" : "regression", cells: [esc(r.run_id), esc(r.started_at || "-"), esc(r.outcome),
          fmt(r.built), fmt(r.reused), r.failed.map(f => `${esc(f.stage)}/${esc(f.key)}: ${esc(f.error)}`).concat(
            r.died_building.map(b => `${esc(b)}: ${r.outcome === "running" ? "building now" : "its process died while building"}`)).join("<br>") || "-",
          r.relaunches.map(x => esc(x.why)).join("<br>") || "-", fmt(r.corrupt),
          r.verdicts.map(v => `${esc(v.task)}: ${v.valid ? "VALID" : "INVALID"}, accuracy ${v.accuracy ? "PASS" : "FAIL"}` +
            (v.regression ? ", regression" : "")).join("<br>") || "-"]})), "runs"));
    },
  };

  if (!D || D.page !== page) {
    const msg = `perfdag site: this page's data file (data/${page}.js) is missing or is another page's; rebuild the site`;
    content.innerHTML = `<p class="error">${esc(msg)}</p>`;
    console.error(msg);
    return;
  }
  document.getElementById("how").textContent = D.how || "";
  render[page]();
  document.body.dataset.rendered = "yes";
})();

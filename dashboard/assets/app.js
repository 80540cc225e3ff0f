// The queue dashboard's page script. Every string from the server is put
// in the page as text (textContent, or the text of a created node); the
// page never parses markup from data.
"use strict";

(function () {
  var $ = function (id) { return document.getElementById(id); };
  var state = null;      // the latest api/state
  var timer = null;
  var deadLoaded = 0;    // when the dead list was last fetched (ms)

  // el builds an element with properties and children (strings become
  // text nodes).
  function el(tag, props) {
    var n = document.createElement(tag);
    if (props) {
      for (var k in props) {
        if (k === "text") n.textContent = props[k];
        else if (k === "class") n.className = props[k];
        else if (k === "data") { for (var d in props.data) n.dataset[d] = props.data[d]; }
        else n[k] = props[k];
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c == null) continue;
      n.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return n;
  }
  // shown escapes the characters that would hide or reorder the text
  // around them: controls (C0, C1) and format characters (bidirectional
  // overrides and isolates, zero-width marks), written as \u202e. A key
  // "k-\u202etxt.exe" must not read as "k-exe.txt".
  var hiddenChars = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;
  function shown(s) {
    return String(s).replace(hiddenChars, function (c) {
      var h = c.codePointAt(0).toString(16);
      return h.length <= 4 ? "\\u" + "0000".slice(h.length) + h : "\\U" + "00000000".slice(h.length) + h;
    });
  }
  // cellMax is the most characters a table cell shows; the job's detail
  // shows the whole value.
  var cellMax = 120;
  function cut(s) {
    var a = Array.from(s);
    return a.length <= cellMax ? s : a.slice(0, cellMax - 1).join("") + "…";
  }
  // setText shows a value of the server in a table cell: escaped, cut to
  // cellMax characters, the escaped value (as the server capped it) in
  // the cell's tooltip when it was cut.
  function setText(cell, v) {
    var s = shown(v == null ? "" : v), c = cut(s);
    cell.textContent = c;
    if (c !== s) cell.title = s; else cell.removeAttribute("title");
  }
  function td(text, cls) { var c = el("td", { class: cls || "" }); setText(c, text); return c; }
  function fillBody(table, rows, cols, emptyText) {
    var body = table.tBodies[0];
    if (rows.length === 0) {
      var c = el("td", { text: emptyText, class: "empty" });
      c.colSpan = cols;
      body.replaceChildren(el("tr", null, c));
      return;
    }
    body.replaceChildren.apply(body, rows);
  }
  // placeRows shows rows, which the caller keeps across refreshes in
  // byKey, in table: it forgets the kept rows not among them, and leaves
  // the body alone when it already holds exactly these rows.
  function placeRows(table, byKey, rows, cols, emptyText) {
    var keep = new Set(rows);
    byKey.forEach(function (tr, k) { if (!keep.has(tr)) byKey.delete(k); });
    var body = table.tBodies[0];
    var same = rows.length === body.rows.length && rows.every(function (tr, i) { return body.rows[i] === tr; });
    if (!same) fillBody(table, rows, cols, emptyText);
  }
  function fmt(n, digits) {
    if (n == null || isNaN(n)) return "–";
    return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits == null ? 1 : digits });
  }
  function fmtMs(ms) {
    if (ms == null) return "–";
    if (ms >= 1000) return fmt(ms / 1000, 2) + " s";
    return fmt(ms, ms < 10 ? 2 : 0) + " ms";
  }
  function fmtIn(sec) {
    var a = Math.abs(sec), s;
    if (a < 1) s = fmt(a * 1000, 0) + " ms";
    else if (a < 120) s = fmt(a, 1) + " s";
    else if (a < 7200) s = fmt(a / 60, 1) + " min";
    else s = fmt(a / 3600, 1) + " h";
    return sec < 0 ? "overdue " + s : s;
  }
  function fmtTime(iso) {
    if (!iso) return "";
    var d = new Date(iso);
    return isNaN(d) ? String(iso) : d.toLocaleTimeString();
  }

  function notice(msg, isErr) {
    var n = $("notice");
    n.textContent = cut(shown(msg));
    n.className = isErr ? "err" : "";
    n.hidden = !msg;
  }

  // ---- rendering

  function renderHeader(s) {
    $("qname").textContent = shown(s.name);
    $("qstate").textContent = s.state;
    $("qstate").className = "badge " + (s.state === "running" ? "running" : s.state === "paused" ? "warn" : "");
    var st = s.store.backend;
    if (s.store.backend !== "memory") {
      st += s.store.healthy ? ", healthy" : ", unhealthy";
      st += s.store.leader ? ", leader" : "";
    }
    if (s.store.detail) st += " (" + cut(shown(s.store.detail)) + ")";
    $("store").textContent = "store: " + st;
    // The state badge says "paused" when this process knows of the pause;
    // the paused badge tells of one only the store knows (another
    // process paused the queue).
    $("paused").hidden = !s.paused || s.state === "paused";
    $("queue-actions").hidden = !(s.jobs && s.actions);
    $("pause-btn").hidden = s.paused;
    $("resume-btn").hidden = !s.paused;
    $("mode").textContent = s.actions ? "actions enabled" : "read-only";
    $("mode").className = "badge " + (s.actions ? "rw" : "");
    // A slow store's figures are taken in the background: say how old.
    var age = s.stats_age_ms > s.interval_ms ? " (figures " + fmtIn(s.stats_age_ms / 1000) + " old)" : "";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString() + age;
    $("interval").textContent = fmt(s.interval_ms / 1000, 2) + " s";
  }

  function renderOverview(s) {
    var c = s.counts;
    var cards = [
      ["depth", fmt(s.depth, 0) + " / " + fmt(s.capacity, 0)],
      ["fill", fmt(s.fill_pct, 1) + " %"],
      ["running", fmt(s.running, 0)],
      ["scheduled", fmt(s.scheduled, 0)],
      ["waiting", fmt(s.waiting, 0)],
      ["enqueued", fmt(c.enqueued, 0)],
      ["done", fmt(c.done, 0)],
      ["failed runs", fmt(c.failed, 0)],
      ["dead", fmt(c.dead, 0)],
      ["cancelled", fmt(c.cancelled, 0)],
      ["dropped", fmt(c.dropped_full + c.dropped_limit, 0)],
      ["rate limited", fmt(c.rate_limited, 0)]
    ];
    if (s.states) {
      ["ready", "scheduled", "running", "waiting", "dead"].forEach(function (k) {
        cards.push([k + " now", fmt(s.states[k] || 0, 0)]);
      });
    }
    $("overview").replaceChildren.apply($("overview"), cards.map(function (kv) {
      return el("div", { class: "card" }, el("div", { class: "v", text: kv[1] }), el("div", { class: "k", text: kv[0] }));
    }));
    renderCountsAge(s);
  }

  // renderCountsAge says how fresh the jobs per state are: the server
  // counts them at most every states_every_ms, in the background, since
  // a count reads every job on a durable store.
  function renderCountsAge(s) {
    var p = $("states-age");
    p.hidden = !s.states;
    if (!s.states) return;
    var t = s.states_counted_at ? fmtIn(s.states_age_ms / 1000) + " ago" : "not yet";
    if (s.states_took_ms) t += " (took " + fmtMs(s.states_took_ms) + ")";
    if (s.states_counting) t += ", counting now…";
    else if (s.states_every_ms) t += ", again every " + fmtIn(s.states_every_ms / 1000);
    if (s.states_error) t += "; the last count failed: " + cut(shown(s.states_error));
    $("states-age-text").textContent = t;
  }

  function kv(dl, pairs) {
    var nodes = [];
    pairs.forEach(function (p) { nodes.push(el("dt", { text: p[0] }), el("dd", { text: shown(p[1]) })); });
    dl.replaceChildren.apply(dl, nodes);
  }

  function renderWorkers(s) {
    kv($("workers"), [
      ["active", fmt(s.workers, 0)], ["base", fmt(s.base_workers, 0)], ["max", fmt(s.max_workers, 0)],
      ["running jobs", fmt(s.running, 0)], ["panics", fmt(s.counts.panics, 0)], ["rescued", fmt(s.counts.rescued, 0)]
    ]);
    var rows = s.ready_by_priority.map(function (p) {
      return el("tr", null, td(p.priority), td(fmt(p.ready, 0), "num"));
    });
    fillBody($("priorities"), rows, 2, "no ready jobs");
  }

  function targetDetail(t) {
    if (t.health === "disabled") return "since " + fmtTime(t.disabled_at) + (t.reason ? ": " + t.reason : "");
    if (t.health === "suspended") return "until " + fmtTime(t.suspended_until);
    if (t.breaker && t.breaker !== "closed") return "breaker " + t.breaker;
    return "";
  }

  function actionButtons(target) {
    var cell = el("td", { class: "act" });
    [["suspend", 0], ["resume"], ["disable"], ["enable"]].forEach(function (a) {
      cell.appendChild(el("button", { type: "button", text: a[0], data: { action: a[0], target: target } }));
    });
    return cell;
  }

  // Target rows are kept across refreshes, keyed by name, and only their
  // texts change: a row rebuilt on every refresh would swallow a click
  // that lands while it is replaced.
  var targetRows = new Map();

  function targetRow(name, actions) {
    var cells = [td(name), el("td", null, el("span", { class: "badge" })), td("", "num"), td("", "num"),
      td("", "num"), td(""), actions ? actionButtons(name) : td("", "act")];
    var tr = el("tr", { data: { target: name } });
    cells.forEach(function (c) { tr.appendChild(c); });
    return tr;
  }

  function renderTargets(s) {
    var rows = s.targets.map(function (t) {
      var tr = targetRows.get(t.name);
      if (!tr) { tr = targetRow(t.name, s.actions); targetRows.set(t.name, tr); }
      var c = tr.cells, badge = c[1].firstChild;
      badge.textContent = t.health;
      badge.className = "badge h-" + t.health;
      c[2].textContent = fmt(t.failures, 0);
      c[3].textContent = fmt(t.running, 0);
      c[4].textContent = fmt(t.parked, 0);
      setText(c[5], targetDetail(t));
      return tr;
    });
    placeRows($("targets"), targetRows, rows, 7, s.latency ? "no targets seen yet" :
      "no target is suspended, disabled or failing (healthy ones are listed with dashboard.WithRecorder)");
    $("target-form").hidden = !s.actions;
  }

  function renderScheduled(s) {
    var now = new Date(s.now).getTime();
    var rows = s.next_scheduled.map(function (j) {
      return el("tr", null, td(fmtIn((new Date(j.run_at).getTime() - now) / 1000)), td(j.id, "num"),
        td(j.key), td(j.target), td(j.priority), td(j.attempt, "num"));
    });
    fillBody($("scheduled"), rows, 6, "nothing scheduled");
  }

  function renderPeriodic(s) {
    var now = new Date(s.now).getTime();
    var zero = function (iso) { return !iso || iso.indexOf("0001-01-01") === 0; };
    var rows = s.periodic.map(function (p) {
      var next = zero(p.next) ? "never" : fmtIn((new Date(p.next).getTime() - now) / 1000);
      return el("tr", null, td(p.name), td(next), td(zero(p.last) ? "–" : fmtTime(p.last)),
        td(p.last_outcome || "–"), td(p.runs, "num"), td(p.last_error));
    });
    fillBody($("periodic"), rows, 6, "no periodic jobs");
  }

  function renderErrors(s) {
    var rows = s.recent_errors.map(function (e) {
      return el("tr", null, td(fmtTime(e.time)), td(e.job_id, "num"), td(e.key), td(e.target),
        td(e.attempt, "num"), td(e.error));
    });
    fillBody($("errors"), rows, 6, "no recent errors");
  }

  // ---- the chart: depth (left axis), done/s and run time (each scaled
  // to its own maximum), over the samples the server keeps.

  function drawChart(s) {
    var cv = $("chart"), h = s.history;
    var dpr = window.devicePixelRatio || 1;
    var w = cv.clientWidth || 900, ht = cv.clientHeight || 240;
    if (cv.width !== Math.round(w * dpr)) { cv.width = Math.round(w * dpr); cv.height = Math.round(ht * dpr); }
    var g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, ht);
    var pad = { l: 44, r: 44, t: 8, b: 20 };
    var pw = w - pad.l - pad.r, ph = ht - pad.t - pad.b;
    g.strokeStyle = "#e5e7eb"; g.lineWidth = 1;
    g.strokeRect(pad.l, pad.t, pw, ph);
    cv.dataset.samples = String(h.length);
    if (h.length) cv.dataset.done = String(h[h.length - 1].done);
    if (h.length < 2) return;
    var t0 = h[0].t, t1 = h[h.length - 1].t, span = Math.max(t1 - t0, 1);
    var x = function (t) { return pad.l + (t - t0) / span * pw; };
    function series(get, color, max) {
      max = max > 0 ? max : 1;
      g.strokeStyle = color; g.lineWidth = 1.5; g.beginPath();
      var open = false;
      h.forEach(function (p, i) {
        var v = get(p, i);
        if (v == null || p.gap) { open = false; if (v == null) return; }
        var px = x(p.t), py = pad.t + ph - Math.min(v / max, 1) * ph;
        if (open) g.lineTo(px, py); else g.moveTo(px, py);
        open = true;
      });
      g.stroke();
    }
    var maxOf = function (get) { return h.reduce(function (m, p, i) { var v = get(p, i); return v != null && v > m ? v : m; }, 0); };
    var depth = function (p) { return p.depth; };
    var tput = function (p, i) { return i === 0 ? null : p.throughput; };
    var lat = function (p) { return p.latency_ms == null ? null : p.latency_ms; };
    var md = maxOf(depth), mt = maxOf(tput), ml = maxOf(lat);
    series(depth, "#2563eb", md);
    series(tput, "#059669", mt);
    if (s.latency) series(lat, "#d97706", ml);
    g.fillStyle = "#6b7280"; g.font = "11px system-ui, sans-serif";
    g.textAlign = "right"; g.fillText(fmt(md, 0), pad.l - 4, pad.t + 10); g.fillText("0", pad.l - 4, pad.t + ph);
    g.textAlign = "left"; g.fillText(fmt(mt, 1) + "/s", pad.l + pw + 4, pad.t + 10);
    if (s.latency) g.fillText(fmtMs(ml), pad.l + pw + 4, pad.t + 24);
    g.fillText("-" + fmt(span / 60000, 1) + " min", pad.l, ht - 4);
    g.textAlign = "right"; g.fillText("now", pad.l + pw, ht - 4);
  }

  function renderLegend(s) {
    var h = s.history, last = h[h.length - 1];
    $("cur-depth").textContent = fmt(s.depth, 0);
    $("cur-throughput").textContent = last && h.length > 1 ? fmt(last.throughput, 1) : "–";
    // The latest run time measured: a sample in which no job ended has none.
    var lat = null;
    for (var i = h.length - 1; i >= 0 && lat == null; i--) lat = h[i].latency_ms;
    $("cur-latency").textContent = s.latency ? fmtMs(lat) : "needs WithAdmin or WithRecorder";
    $("chart-span").textContent = h.length + " samples";
  }

  // ---- dead jobs and job detail (the admin API: WithAdmin)

  // Dead rows are kept across refreshes, keyed by job ID, and only their
  // texts change, as target rows are: a click pressed on a row's button
  // and released after the row was rebuilt would be lost.
  var deadRows = new Map();

  function deadRow(id, actions) {
    var act = el("td", { class: "act" });
    if (actions) {
      act.appendChild(el("button", { type: "button", text: "retry", data: { jobAction: "retry", job: id } }));
      act.appendChild(el("button", { type: "button", text: "delete", data: { jobAction: "delete", job: id } }));
    }
    return el("tr", { data: { deadJob: id } }, el("td", { class: "num" },
      el("button", { type: "button", text: id, data: { job: id } })), td(""), td(""), td("", "num"), td(""), td(""), act);
  }

  function renderDead(jobs) {
    var rows = jobs.map(function (j) {
      var id = String(j.id), tr = deadRows.get(id);
      if (!tr) { tr = deadRow(id, state && state.actions); deadRows.set(id, tr); }
      var c = tr.cells;
      setText(c[1], j.key || "");
      setText(c[2], j.target || "");
      c[3].textContent = String(j.attempt);
      setText(c[4], j.last_error || "");
      c[5].textContent = fmtTime(j.updated);
      return tr;
    });
    placeRows($("dead"), deadRows, rows, 7, "no dead jobs");
  }

  function loadDead(s) {
    $("jobs-placeholder").hidden = s.jobs;
    $("dead").hidden = !s.jobs;
    if (!s.jobs || Date.now() - deadLoaded < 5 * s.interval_ms) return;
    deadLoaded = Date.now();
    fetch("api/jobs/dead", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("dead jobs: HTTP " + r.status)); })
      .then(renderDead)
      .catch(function (e) { notice(e.message, true); });
  }

  function showJob(id) {
    fetch("api/jobs/" + encodeURIComponent(id), { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("job " + id + ": HTTP " + r.status)); })
      .then(function (j) {
        $("job-detail-id").textContent = String(j.id);
        var rows = [["state", j.state], ["key", j.key || ""], ["target", j.target || ""],
          ["priority", j.priority || ""], ["attempt", j.attempt], ["last error", j.last_error || ""], ["updated", fmtTime(j.updated)]];
        // The job's metadata, a row a pair: text its producer chose, set
        // as text (kv) like every other field.
        Object.keys(j.meta || {}).sort().forEach(function (k) { rows.push(["meta " + k, j.meta[k]]); });
        kv($("job-detail").querySelector("dl"), rows);
        var d = $("job-detail");
        d.hidden = false;
        // It floats in the corner of the window (app.css), where the user
        // is, whatever the table's length; back to its top for a new job.
        d.scrollTop = 0;
        $("job-detail-close").focus({ preventScroll: true });
      })
      .catch(function (e) { notice(e.message, true); });
  }

  // ---- actions

  function post(path, body) {
    if (!state || !state.actions) return Promise.reject(new Error("the dashboard is read-only"));
    return fetch(path, {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "X-Dashboard-Token": state.csrf },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (j) {
        if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
        return j;
      });
    });
  }

  function targetAction(action, target, seconds) {
    if (!target) { notice("give a target name", true); return; }
    var body = { target: target };
    if (action === "suspend") body.seconds = Number(seconds) || 0;
    post("api/targets/" + action, body)
      .then(function (t) { notice(action + " " + target + ": now " + t.health, false); refresh(); })
      .catch(function (e) { notice(action + " " + target + ": " + e.message, true); });
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest ? ev.target.closest("button") : null;
    if (!b) return;
    if (b.dataset.action) {
      var inForm = b.closest("form");
      var target = inForm ? $("target-name").value.trim() : b.dataset.target;
      var secs = inForm ? $("target-secs").value : 0;
      targetAction(b.dataset.action, target, secs);
    } else if (b.dataset.queueAction) {
      post("api/queue/" + b.dataset.queueAction, {})
        .then(function (r) { notice("queue " + (r.paused ? "paused" : "resumed"), false); refresh(); })
        .catch(function (e) { notice(b.dataset.queueAction + ": " + e.message, true); });
    } else if (b.dataset.jobAction) {
      // Deleting cannot be undone: ask first. Retrying asks nothing.
      if (b.dataset.jobAction === "delete" &&
          !window.confirm("Delete job " + b.dataset.job + "? It cannot be undone.")) return;
      post("api/jobs/" + encodeURIComponent(b.dataset.job) + "/" + b.dataset.jobAction, {})
        .then(function () { notice(b.dataset.jobAction + " job " + b.dataset.job + ": done", false); deadLoaded = 0; refresh(); })
        .catch(function (e) { notice(b.dataset.jobAction + " job " + b.dataset.job + ": " + e.message, true); });
    } else if (b.dataset.job) {
      showJob(b.dataset.job);
    } else if (b.dataset.countNow) {
      b.disabled = true;
      fetch("api/counts", { cache: "no-store", credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("count: HTTP " + r.status)); })
        .then(function () { return refresh(); })
        .catch(function (e) { notice(e.message, true); })
        .then(function () { b.disabled = false; });
    } else if (b.id === "job-detail-close") {
      $("job-detail").hidden = true;
    }
  });

  // ---- polling

  function render(s) {
    state = s;
    renderHeader(s);
    renderOverview(s);
    renderLegend(s);
    drawChart(s);
    renderWorkers(s);
    renderTargets(s);
    renderScheduled(s);
    renderPeriodic(s);
    renderErrors(s);
    loadDead(s);
    document.body.dataset.ready = "true";
  }

  function refresh() {
    return fetch("api/state", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("state: HTTP " + r.status)); })
      .then(render)
      .catch(function (e) { $("updated").textContent = "not updated: " + e.message; });
  }

  function loop() {
    refresh().then(function () {
      timer = setTimeout(loop, state ? state.interval_ms : 1000);
    });
  }

  window.addEventListener("resize", function () { if (state) drawChart(state); });
  loop();
})();

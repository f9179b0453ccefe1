/// The status page: one self-contained HTML document (no CDN, no web fonts, no map tiles: the
/// boat may have no internet), drawn in the browser from `/status.json`, polled every few
/// seconds. A Swift string rather than a SwiftPM resource: nothing to find at run time, and the
/// binary is the whole install.
///
/// Every text that comes from the spool (device and destination names, errors, log lines) goes
/// through `esc` before it reaches `innerHTML`: a device id is whatever a collector sent.
/// Hooks for the browser test: each card has `data-destination` / `data-device`, each figure a
/// `data-field` and, where the text is formatted, the raw value in `data-value`.
extension StatusPage {
    static let document = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="color-scheme" content="light dark">
        <title>georelay status</title>
        <style>
        :root { --bg:#f4f5f7; --card:#fff; --ink:#1b1f24; --dim:#5b6470; --line:#d8dce2; --ok:#1a7f37; --warn:#b35900; --bad:#c62828; --off:#6b7280;
          --pending:#2f6fd6; --bytes:#8a5cd0; --track:#2f6fd6; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
        @media (prefers-color-scheme: dark) {
          :root { --bg:#111418; --card:#1c2127; --ink:#e6e9ee; --dim:#9aa4b1; --line:#323a44; --ok:#3fb950; --warn:#e3a008; --bad:#f26b6b; --off:#8b949e;
            --pending:#6ea8ff; --bytes:#b592f0; --track:#6ea8ff; }
        }
        * { box-sizing: border-box; }
        body { margin:0; background:var(--bg); color:var(--ink); font-size:15px; line-height:1.4; }
        header { display:flex; flex-wrap:wrap; gap:.3rem 1rem; align-items:baseline; padding:.8rem 1rem; background:var(--card); border-bottom:1px solid var(--line); }
        header h1 { font-size:1.15rem; margin:0; }
        header .meta { color:var(--dim); font-size:.85rem; }
        main { max-width:1240px; margin:0 auto; padding:.6rem; }
        h2 { font-size:.8rem; text-transform:uppercase; letter-spacing:.06em; color:var(--dim); margin:1rem .4rem .4rem; }
        .grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(340px, 1fr)); gap:.6rem; }
        @media (max-width:420px) { .grid { grid-template-columns:1fr; } }
        article, .box { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:.7rem .8rem; min-width:0; }
        article h3 { font-size:1.05rem; margin:0 0 .35rem; display:flex; justify-content:space-between; gap:.5rem; align-items:baseline; overflow-wrap:anywhere; }
        .sub { color:var(--dim); font-size:.8rem; font-weight:normal; overflow-wrap:anywhere; }
        .state { display:inline-block; padding:.1rem .5rem; border-radius:999px; font-size:.85rem; font-weight:600; color:#fff; white-space:nowrap; }
        .s-ok { background:var(--ok); } .s-warn { background:var(--warn); } .s-bad { background:var(--bad); } .s-off { background:var(--off); }
        dl { display:grid; grid-template-columns:auto 1fr; gap:.15rem .8rem; margin:.3rem 0; font-size:.92rem; }
        dt { color:var(--dim); } dd { margin:0; font-variant-numeric:tabular-nums; overflow-wrap:anywhere; }
        .error { margin:.4rem 0 .2rem; padding:.4rem .55rem; border-left:3px solid var(--warn); background:color-mix(in srgb, var(--warn) 10%, transparent); font-size:.88rem; }
        .error small { display:block; color:var(--dim); overflow-wrap:anywhere; }
        svg { display:block; width:100%; height:auto; }
        svg text { fill:var(--dim); font-size:10px; font-family:inherit; }
        .legend { font-size:.75rem; color:var(--dim); display:flex; gap:.8rem; flex-wrap:wrap; }
        .legend i { display:inline-block; width:.7rem; height:.7rem; border-radius:2px; margin-right:.25rem; vertical-align:-1px; }
        ul.checks, ul.log { list-style:none; margin:0; padding:0; }
        ul.checks li { display:grid; grid-template-columns:6.5rem 1fr; gap:.5rem; padding:.3rem 0; border-bottom:1px solid var(--line); font-size:.9rem; }
        ul.checks li:last-child, ul.log li:last-child { border-bottom:0; }
        .dot { display:inline-block; width:.6rem; height:.6rem; border-radius:50%; margin-right:.35rem; }
        ul.log li { padding:.25rem 0; border-bottom:1px solid var(--line); font-size:.82rem; overflow-wrap:anywhere; }
        ul.log time { color:var(--dim); margin-right:.4rem; font-variant-numeric:tabular-nums; }
        .lv-error { color:var(--bad); font-weight:600; } .lv-warning { color:var(--warn); font-weight:600; }
        #reasons { list-style:none; margin:.6rem .6rem 0; padding:0; }
        #reasons li { margin:0 0 .3rem; padding:.45rem .7rem; border-radius:8px; border-left:4px solid var(--warn); background:var(--card); font-size:.88rem; overflow-wrap:anywhere; }
        #reasons li.failing { border-left-color:var(--bad); }
        #banner { display:none; margin:.6rem; padding:.6rem .8rem; border-radius:8px; background:var(--bad); color:#fff; }
        .pair { display:grid; grid-template-columns:1fr; gap:0 .6rem; }
        @media (min-width:900px) { .pair { grid-template-columns:1fr 1fr; } }
        .empty { color:var(--dim); font-size:.9rem; padding:.3rem .4rem; }
        </style>
        </head>
        <body>
        <header>
          <h1>georelay</h1>
          <span id="overall" class="state s-off" data-field="overall">loading</span>
          <span class="meta" id="meta">waiting for the relay…</span>
        </header>
        <div id="banner" role="alert"></div>
        <ul id="reasons"></ul>
        <main>
          <h2>Uplink: where positions go</h2>
          <div class="grid" id="destinations"><div class="empty">loading…</div></div>
          <div class="grid" id="uplinks"></div>
          <h2>GPS units: where we are</h2>
          <div class="grid" id="devices"><div class="empty">loading…</div></div>
          <div class="pair">
            <section><h2>Health</h2><div class="box"><ul class="checks" id="checks"></ul></div></section>
            <section><h2>Newest log entries</h2><div class="box"><ul class="log" id="log"></ul></div></section>
          </div>
        </main>
        <script>
        "use strict";
        const REFRESH_MS = 3000;
        const $ = (id) => document.getElementById(id);
        function esc(v) {
          return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
        }
        // The same units as `georelay status` (binary prefixes, one decimal).
        function bytes(n) {
          const units = ["B", "KiB", "MiB", "GiB", "TiB"];
          let v = n, u = 0;
          while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
          return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
        }
        function duration(s) {
          s = Math.max(0, Math.round(s));
          if (s < 120) return `${s} s`;
          if (s < 7200) return `${Math.floor(s / 60)} min`;
          if (s < 172800) { const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); return m ? `${h} h ${m} min` : `${h} h`; }
          return `${Math.floor(s / 86400)} d`;
        }
        function ago(iso, now) {
          if (!iso) return "never";
          return `${duration((now - Date.parse(iso)) / 1000)} ago`;
        }
        function clock(iso) {
          const d = new Date(iso);
          return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
        }
        function count(n) { return Number(n).toLocaleString("en-US"); }
        function dm(deg, pos, neg) {
          const a = Math.abs(deg), d = Math.floor(a), m = (a - d) * 60;
          return `${d}° ${m.toFixed(3)}′ ${deg >= 0 ? pos : neg}`;
        }
        const STATES = {
          "online": ["Up: sending", "s-ok"],
          "backoff": ["Down: waiting to retry", "s-warn"],
          "probing": ["Down: checking the link", "s-warn"],
          "auth-failed": ["Login refused", "s-bad"],
          "deferred": ["Budget spent: alarms and a position now and then", "s-warn"],
          "disabled": ["Disabled", "s-off"],
          "not started": ["Not started yet", "s-off"],
          "stopped": ["Relay stopped", "s-off"],
        };
        function stateOf(s) { return STATES[s] || [s, "s-off"]; }
        // What a forwarder recorded, said for the crew; the recorded text stays underneath.
        function plain(error) {
          const rules = [
            [/could ?n.t connect|connection refused|failed to connect|ECONNREFUSED/i, "The server did not take the connection: it is down, or nothing listens at that address."],
            [/resolve/i, "The server's name could not be looked up: no DNS, so probably no internet on board."],
            [/time[d ]?\s?out/i, "The server did not answer in time: the link is slow or down."],
            [/(HTTP|status)\s*(401|403)|auth|credential|login/i, "The server refused our login: the credentials need checking ashore."],
            [/(HTTP|status)\s*5\d\d|\b50[0-9]\b/i, "The server answered with an error of its own; it is tried again."],
            [/(HTTP|status)\s*4\d\d/i, "The server refused what we sent; see the detail below."],
            [/certificate|SSL|TLS/i, "The secure connection failed: a certificate or TLS problem."],
            [/network is unreachable|no route|host unreachable/i, "No route to the server: the uplink is down."],
            [/reset|closed|empty reply|recv failure|send failure/i, "The connection broke off mid-way: the link is unsteady."],
          ];
          for (const [re, text] of rules) if (re.test(error)) return text;
          return "Delivery failed; see the detail below.";
        }

        function chart(history) {
          const rows = (history && history.rows) || [];
          const W = 320, H = 90, top = 8, bottom = 16, left = 2, right = 2;
          const now = Date.now() / 1000, start = now - 86400;
          const x = (t) => left + (W - left - right) * Math.min(1, Math.max(0, (t - start) / 86400));
          let bars = "", line = "", maxP = 0, maxB = 0;
          const sent = [];
          for (let i = 0; i < rows.length; i++) {
            maxP = Math.max(maxP, rows[i][1]);
            if (i > 0) { const d = Math.max(0, rows[i][2] - rows[i - 1][2]); sent.push([rows[i - 1][0], rows[i][0], d]); maxB = Math.max(maxB, d); }
          }
          const y = (v, max) => H - bottom - (H - top - bottom) * (max > 0 ? v / max : 0);
          for (const [t0, t1, d] of sent) {
            if (d <= 0 || t1 < start) continue;
            const x0 = x(t0), w = Math.max(1, x(t1) - x0 - 0.5);
            bars += `<rect x="${x0.toFixed(1)}" y="${y(d, maxB).toFixed(1)}" width="${w.toFixed(1)}" height="${(H - bottom - y(d, maxB)).toFixed(1)}" fill="var(--bytes)" opacity=".55"/>`;
          }
          const pts = rows.filter((r) => r[0] >= start).map((r) => `${x(r[0]).toFixed(1)},${y(r[1], maxP).toFixed(1)}`);
          if (pts.length === 1) line = `<circle cx="${pts[0].split(",")[0]}" cy="${pts[0].split(",")[1]}" r="2.5" fill="var(--pending)"/>`;
          else if (pts.length > 1) line = `<polyline points="${pts.join(" ")}" fill="none" stroke="var(--pending)" stroke-width="1.8" stroke-linejoin="round"/>`;
          const empty = rows.length === 0 ? `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no samples yet (one every 5 min)</text>` : "";
          return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="pending positions and bytes sent over the last 24 hours" data-field="chart" data-samples="${rows.length}">
            <line x1="${left}" y1="${H - bottom}" x2="${W - right}" y2="${H - bottom}" stroke="var(--line)"/>
            ${bars}${line}${empty}
            <text x="${left}" y="${H - 3}">24 h ago</text><text x="${W / 2}" y="${H - 3}" text-anchor="middle">12 h</text><text x="${W - right}" y="${H - 3}" text-anchor="end">now</text>
          </svg>
          <div class="legend"><span><i style="background:var(--pending)"></i>pending, peak ${count(maxP)}</span><span><i style="background:var(--bytes)"></i>bytes per 5 min, peak ${bytes(maxB)}</span></div>`;
        }

        function destination(d, now) {
          const [words, cls] = stateOf(d.state);
          const drain = d.pending === 0 ? "nothing waiting" : d.drainEstimateSeconds == null ? "unknown (nothing sent lately)" : `about ${duration(d.drainEstimateSeconds)}`;
          const oldest = d.oldestPendingAgeSeconds == null ? "none" : duration(d.oldestPendingAgeSeconds);
          let error = "";
          if (d.lastError && d.state !== "online") {
            error = `<div class="error" data-field="lastError">${esc(plain(d.lastError))}<small>${esc(d.lastError)}${d.nextAttempt ? ` · next try in ${duration((Date.parse(d.nextAttempt) - now) / 1000)}` : ""}</small></div>`;
          }
          return `<article class="dest" data-destination="${esc(d.name)}">
            <h3><span>${esc(d.name)}</span>
              <span class="state ${cls}" data-field="state" data-value="${esc(d.state)}">${esc(words)}</span></h3>
            <div class="sub">${esc(d.type)} · ${esc(d.url)}</div>
            <dl>
              <dt>Waiting</dt><dd data-field="pending" data-value="${d.pending}">${count(d.pending)} positions${d.buffered ? "" : " (real-time only)"}</dd>
              <dt>Oldest waiting</dt><dd data-field="oldest">${esc(oldest)}</dd>
              <dt>Last success</dt><dd data-field="lastSuccess" data-value="${esc(d.lastSuccess || "")}">${esc(ago(d.lastSuccess, now))}</dd>
              <dt>Time to drain</dt><dd data-field="drain">${esc(drain)}</dd>
              <dt>Sent today</dt><dd data-field="wireBytesToday" data-value="${d.wireBytesToday}">${bytes(d.wireBytesToday)}</dd>
              <dt>This month</dt><dd data-field="wireBytesThisMonth" data-value="${d.wireBytesThisMonth}">${bytes(d.wireBytesThisMonth)}</dd>
              <dt>Of it data</dt><dd data-field="payloadBytes" data-value="${d.payloadBytes || 0}" title="what the relay sent and read (requests, answers, frames) against what the link billed (TCP/IP headers, handshakes, retransmissions, TLS) since the relay started">${bytes(d.payloadBytes || 0)} of ${bytes(d.wireBytes || 0)} since start</dd>
              ${d.sentBehindNewer ? `<dt>Behind newer</dt><dd data-field="sentBehindNewer" data-value="${d.sentBehindNewer}" title="positions delivered older than one of their device the server already had: Traccar's event handlers skip them (geofences, overspeed, motion, alarms)">${count(d.sentBehindNewer)} of ${count(d.sent || 0)} sent: no events</dd>` : ""}
              ${d.uplink ? `<dt>Via</dt><dd data-field="uplink" data-value="${esc(d.uplink.name || "")}">${esc(via(d.uplink))}</dd>` : ""}
            </dl>
            ${error}
            ${chart(d.history)}
          </article>`;
        }

        function via(u) {
          if (u.unknown) return `no route (${u.unknown})`;
          return u.name ? `${u.name} (${u.interface}${u.metered ? ", metered" : ""})` : `${u.interface} (no uplink of the config)`;
        }

        // One card per configured uplink: what it carried against its budget, and what waits for it.
        function uplink(u, destinations) {
          const b = u.budget;
          const of = (used, limit) => limit == null ? bytes(used) : `${bytes(used)} of ${bytes(limit)}`;
          const carrying = destinations.filter((d) => d.uplink && d.uplink.name === u.name).map((d) => d.name);
          const [words, cls] = b && b.spent ? ["Budget spent", "s-warn"] : carrying.length ? ["Carrying", "s-ok"] : ["Idle", "s-off"];
          return `<article class="uplink" data-uplink="${esc(u.name)}">
            <h3><span>${esc(u.name)} <span class="sub">${esc(u.interface)}${u.metered ? ", metered" : ""}</span></span>
              <span class="state ${cls}" data-field="budgetState" data-value="${b && b.spent ? "spent" : "ok"}">${words}</span></h3>
            <dl>
              <dt>Today</dt><dd data-field="wireBytesToday" data-value="${u.wireBytesToday}">${of(u.wireBytesToday, b && b.dayBytes)}</dd>
              <dt>This month</dt><dd data-field="wireBytesThisMonth" data-value="${u.wireBytesThisMonth}">${of(u.wireBytesThisMonth, b && b.monthBytes)}</dd>
              <dt>Carrying</dt><dd data-field="carrying">${carrying.length ? esc(carrying.join(", ")) : "no destination now"}</dd>
              ${u.deferred ? `<dt>Deferred</dt><dd data-field="deferred" data-value="${u.deferred}">${count(u.deferred)} positions wait for a cheaper link or the next period</dd>` : ""}
            </dl>
          </article>`;
        }

        // The Iridium modem aboard: its sky, its last session in words, the credits against the caps.
        function iridium(m) {
          const last = m.lastSession;
          const [words, cls] = last && last.result.startsWith("cannot") ? ["Cannot send", "s-bad"]
            : m.service === false ? ["No service", "s-warn"] : m.service ? ["In service", "s-ok"] : ["Not heard from", "s-off"];
          return `<article class="uplink" data-sbd="${esc(m.device)}">
            <h3><span>Iridium SBD <span class="sub">${esc(m.device)}</span></span>
              <span class="state ${cls}" data-field="sbdState">${words}</span></h3>
            <dl>
              <dt>Signal</dt><dd data-field="sbdSignal" data-value="${m.signal == null ? "" : m.signal}">${m.signal == null ? "not reported yet" : `${m.signal} of 5 bars`}</dd>
              <dt>Last session</dt><dd data-field="sbdLastSession">${last ? `${esc(clock(last.time))}: ${esc(last.result)}` : "none yet"}</dd>
              <dt>Credits today</dt><dd data-field="sbdCreditsToday" data-value="${m.creditsToday}">${count(m.creditsToday)} of ${count(m.dailyCredits)}</dd>
              <dt>This month</dt><dd data-field="sbdCreditsThisMonth" data-value="${m.creditsThisMonth}">${count(m.creditsThisMonth)} of ${count(m.monthlyCredits)}</dd>
              ${m.alarmsWaiting ? `<dt>Waiting</dt><dd data-field="sbdAlarmsWaiting">${count(m.alarmsWaiting)} alarms</dd>` : ""}
            </dl>
          </article>`;
        }

        function track(t, last) {
          const rows = ((t && t.rows) || []).slice();
          if (last && (rows.length === 0 || rows[rows.length - 1][0] < Date.parse(last.time) / 1000)) rows.push([Date.parse(last.time) / 1000, last.lat, last.lon]);
          if (rows.length === 0) return "";
          const W = 320, H = 180, pad = 14, R = 6371000;
          const lat0 = rows.reduce((a, r) => a + r[1], 0) / rows.length, k = Math.cos(lat0 * Math.PI / 180);
          // Metres east and north of the first point: an equirectangular sketch, north up.
          const pts = rows.map((r) => [(r[2] - rows[0][2]) * Math.PI / 180 * R * k, (r[1] - rows[0][1]) * Math.PI / 180 * R]);
          let minX = Math.min(...pts.map((p) => p[0])), maxX = Math.max(...pts.map((p) => p[0]));
          let minY = Math.min(...pts.map((p) => p[1])), maxY = Math.max(...pts.map((p) => p[1]));
          const span = Math.max(maxX - minX, (maxY - minY) * (W - 2 * pad) / (H - 2 * pad), 200);
          const scale = (W - 2 * pad) / span, cx = (minX + maxX) / 2, cy = (minY + maxY) / 2;
          const px = (p) => [W / 2 + (p[0] - cx) * scale, H / 2 - (p[1] - cy) * scale];
          const xy = pts.map(px);
          const poly = xy.map((p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" ");
          const end = xy[xy.length - 1], startPt = xy[0];
          // Scale bar: the largest 1, 2 or 5 × 10^n metres within a third of the width.
          const target = span / 3; let bar = Math.pow(10, Math.floor(Math.log10(target)));
          for (const f of [5, 2, 1]) if (f * bar <= target) { bar *= f; break; }
          const barPx = bar * scale, label = bar >= 1000 ? `${bar / 1000} km` : `${bar} m`;
          let heading = "";
          if (last && last.course != null) {
            const a = (last.course - 90) * Math.PI / 180, l = 12;
            heading = `<line x1="${end[0].toFixed(1)}" y1="${end[1].toFixed(1)}" x2="${(end[0] + l * Math.cos(a)).toFixed(1)}" y2="${(end[1] + l * Math.sin(a)).toFixed(1)}" stroke="var(--ink)" stroke-width="2"/>`;
          }
          return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="track of the last ${t ? t.hours : 6} hours, north up" data-field="track" data-points="${rows.length}">
            <rect x=".5" y=".5" width="${W - 1}" height="${H - 1}" rx="6" fill="none" stroke="var(--line)"/>
            ${rows.length > 1 ? `<polyline points="${poly}" fill="none" stroke="var(--track)" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"/>` : ""}
            ${rows.length > 1 ? `<circle cx="${startPt[0].toFixed(1)}" cy="${startPt[1].toFixed(1)}" r="2.5" fill="none" stroke="var(--track)"/>` : ""}
            ${heading}<circle cx="${end[0].toFixed(1)}" cy="${end[1].toFixed(1)}" r="4.5" fill="var(--bad)" stroke="var(--card)" stroke-width="1.5"/>
            <g transform="translate(${W - 18},22)"><path d="M0,-12 L5,2 L0,-1 L-5,2 Z" fill="var(--ink)"/><text y="12" text-anchor="middle">N</text></g>
            <g transform="translate(10,${H - 12})"><path d="M0,-4 V0 H${barPx.toFixed(1)} V-4" fill="none" stroke="var(--ink)" stroke-width="1.5"/><text x="${(barPx / 2).toFixed(1)}" y="-6" text-anchor="middle">${label}</text></g>
          </svg>`;
        }

        // A watched vessel's GNSS integrity in plain words: what the receivers say can be trusted,
        // or since when and why not, and how many episodes it has had.
        function integrity(g) {
          const episodes = g.episodes ? ` · ${count(g.episodes)} episode${g.episodes === 1 ? "" : "s"} of jamming or spoofing so far` : "";
          const since = g.since ? ` since ${esc(clock(g.since))}` : "";
          const why = g.evidence ? `: ${esc(g.evidence)}` : "";
          const meaning = { degraded: "positions are sent, flagged", jammed: "the receivers cannot hear the satellites; positions may stop or drift", spoofed: "a false signal: the position shown may not be the vessel's" }[g.state];
          return g.state === "ok" ? `trusted${episodes}` : `<b>${esc(g.state)}</b>${since}${why}${meaning ? ` (${meaning})` : ""}${episodes}`;
        }

        function device(d, now) {
          const p = d.lastPosition;
          const fresh = d.lastReceived && (now - Date.parse(d.lastReceived)) < 120000;
          const g = d.integrity;
          const [words, cls] = g && (g.state === "jammed" || g.state === "spoofed") ? [`GNSS ${g.state}`, "s-bad"]
            : fresh ? ["Reporting", "s-ok"] : d.lastReceived ? ["Silent", "s-warn"] : ["No fix yet", "s-off"];
          const sources = (d.sources || []).map((s) => `<span data-source="${esc(s.name)}"${s.active ? ' data-active="true"' : ""}>${s.active ? "<b>" : ""}${esc(s.name)}${s.active ? " (active)</b>" : ""}</span> <span class="sub">${esc(ago(s.lastFix, now))}</span>`).join("<br>");
          return `<article class="device" data-device="${esc(d.name)}">
            <h3><span>${esc(d.name)}</span><span class="state ${cls}">${words}</span></h3>
            <dl>
              <dt>Last fix</dt><dd data-field="lastFix" data-value="${esc(d.lastFix || "")}">${d.lastFix ? `${esc(clock(d.lastFix))} <span class="sub">(${esc(ago(d.lastFix, now))})</span>` : "none"}</dd>
              ${p ? `<dt>Position</dt><dd data-field="position" data-lat="${p.lat}" data-lon="${p.lon}">${dm(p.lat, "N", "S")}<br>${dm(p.lon, "E", "W")}</dd>
              <dt>Speed</dt><dd data-field="speed">${p.speed == null ? "not given" : `${(p.speed * 1.943844).toFixed(1)} kn`}</dd>
              <dt>Course</dt><dd data-field="course">${p.course == null ? "not given" : `${Math.round(p.course)}°`}</dd>
              ${p.odometer == null ? "" : `<dt>Odometer</dt><dd data-field="odometer">${(p.odometer / 1852).toFixed(1)} nm</dd>`}` : ""}
              ${sources ? `<dt>Sources</dt><dd data-field="sources">${sources}</dd>` : ""}
              ${g ? `<dt>GNSS</dt><dd data-field="integrity" data-value="${esc(g.state)}">${integrity(g)}</dd>` : ""}
            </dl>
            ${track(d.track, p)}
          </article>`;
        }

        const CHECK = { ok: "var(--ok)", degraded: "var(--warn)", failing: "var(--bad)" };
        function render(s) {
          const now = Date.parse(s.time) || Date.now();
          const dh = s.deviceHealth || { state: "unknown", checks: {} };
          const overall = $("overall");
          overall.textContent = !s.running ? "relay not running" : dh.state === "ok" ? "all well" : dh.state;
          overall.className = "state " + (!s.running ? "s-off" : dh.state === "ok" ? "s-ok" : dh.state === "degraded" ? "s-warn" : "s-bad");
          overall.dataset.value = dh.state;
          // What is wrong, first thing on a phone's screen: the checks' own reasons, worst first.
          const bad = Object.values(dh.checks || {}).filter((c) => c.state !== "ok").sort((a, b) => (a.state === "failing" ? -1 : 0) - (b.state === "failing" ? -1 : 0));
          $("reasons").innerHTML = bad.map((c) => `<li class="${esc(c.state)}">${esc(c.summary)}</li>`).join("");
          const up = s.uplink || {};
          $("meta").textContent = `updated ${new Date().toLocaleTimeString()} · uplink today ${bytes(up.wireBytesToday || 0)}, this month ${bytes(up.wireBytesThisMonth || 0)} · spool ${count(s.spool.rows)} positions`;
          $("destinations").innerHTML = s.destinations.length ? s.destinations.map((d) => destination(d, now)).join("") : `<div class="empty">no destinations configured</div>`;
          $("uplinks").innerHTML = (s.uplinks || []).map((u) => uplink(u, s.destinations)).join("") + (s.sbd ? iridium(s.sbd) : "");
          $("devices").innerHTML = s.devices.length ? s.devices.map((d) => device(d, now)).join("") : `<div class="empty">no positions received yet</div>`;
          const checks = Object.entries(dh.checks || {});
          $("checks").innerHTML = checks.map(([k, c]) => `<li data-check="${esc(k)}"><span><i class="dot" style="background:${CHECK[c.state] || "var(--off)"}"></i>${esc(k)}</span><span>${esc(c.summary)}</span></li>`).join("")
            || `<li>${esc(s.health && s.health.reason || "no health checks")}</li>`;
          $("log").innerHTML = (s.log || []).map((e) => `<li><time>${esc(clock(e.time))}</time><span class="lv-${esc(e.level)}">${esc(e.level)}</span> ${esc(e.message)}</li>`).join("") || `<li class="empty">nothing logged</li>`;
        }

        let failingSince = null;
        async function refresh() {
          try {
            const response = await fetch("status.json", { cache: "no-store" });
            if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).trim()}`);
            render(await response.json());
            failingSince = null;
            $("banner").style.display = "none";
            document.body.dataset.refreshed = String(Date.now());
          } catch (e) {
            failingSince = failingSince || new Date();
            $("banner").textContent = `The relay is not answering since ${failingSince.toLocaleTimeString()} (${e.message}); the figures below are from before.`;
            $("banner").style.display = "block";
          }
          setTimeout(refresh, REFRESH_MS);
        }
        refresh();
        </script>
        </body>
        </html>
        """#
}

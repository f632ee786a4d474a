// Live figures: a page whose <body> names a JSON endpoint in data-poll is
// refreshed from it every 2 s. The endpoint answers {fields: {KEY: text},
// plots: {KEY: {unit, t: [ms], series: [{name, v: [number|null]}]}}}; an
// element with data-live="KEY" gets the text, an <svg data-plot="KEY">
// the plot. Nothing else on the page changes, so forms keep their input.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var every = 2000;

  function el(name, attrs, text) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function fmt(v) {
    if (v >= 100) { return v.toFixed(0); }
    if (v >= 10) { return v.toFixed(1); }
    return v.toFixed(2);
  }

  function draw(svg, p) {
    var vb = svg.viewBox.baseVal, w = vb.width, h = vb.height;
    var left = 40, right = 8, top = 14, bottom = 14;
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var n = p.t ? p.t.length : 0;
    if (n < 2) {
      svg.appendChild(el("text", { x: left, y: h / 2 }, p.note || "collecting samples..."));
      return;
    }
    var t0 = p.t[0], t1 = p.t[n - 1], ymax = 0;
    p.series.forEach(function (s) { s.v.forEach(function (v) { if (v !== null && v > ymax) { ymax = v; } }); });
    if (ymax <= 0) { ymax = 1; }
    var x = function (t) { return left + (w - left - right) * (t - t0) / Math.max(1, t1 - t0); };
    var y = function (v) { return top + (h - top - bottom) * (1 - v / ymax); };
    svg.appendChild(el("line", { x1: left, y1: y(0), x2: w - right, y2: y(0), "class": "axis" }));
    svg.appendChild(el("line", { x1: left, y1: top, x2: left, y2: y(0), "class": "axis" }));
    svg.appendChild(el("text", { x: 2, y: top + 4 }, fmt(ymax)));
    svg.appendChild(el("text", { x: 2, y: y(0) }, "0"));
    svg.appendChild(el("text", { x: left, y: h - 2 }, Math.round((t1 - t0) / 1000) + " s shown, " + p.unit));
    p.series.forEach(function (s, i) {
      var pts = [];
      var flush = function () {
        if (pts.length > 1) { svg.appendChild(el("polyline", { points: pts.join(" "), "class": "s" + i })); }
        pts = [];
      };
      s.v.forEach(function (v, j) {
        if (v === null) { flush(); return; }
        pts.push(x(p.t[j]).toFixed(1) + "," + y(v).toFixed(1));
      });
      flush();
      var lx = w - right - 110, ly = top + 2 + i * 11;
      svg.appendChild(el("rect", { x: lx, y: ly - 7, width: 8, height: 8, "class": "s" + i }));
      svg.appendChild(el("text", { x: lx + 11, y: ly }, s.name));
    });
  }

  function apply(data) {
    var f = data.fields || {};
    document.querySelectorAll("[data-live]").forEach(function (e) {
      var k = e.getAttribute("data-live");
      if (!(k in f)) { return; }
      var a = e.querySelector("a");
      (a || e).textContent = f[k];
    });
    var plots = data.plots || {};
    document.querySelectorAll("svg[data-plot]").forEach(function (svg) {
      var p = plots[svg.getAttribute("data-plot")];
      if (p) { draw(svg, p); }
    });
  }

  function status(text, isError) {
    var e = document.getElementById("live-error");
    if (e) {
      e.textContent = isError ? text : "";
      e.classList.toggle("hidden", !isError);
    }
    var s = document.getElementById("live-status");
    if (s && !isError) { s.textContent = text; }
  }

  function poll(url) {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.json().then(function (d) { return { ok: r.ok, d: d }; }); })
      .then(function (res) {
        if (!res.ok) { status(res.d.error || "refresh failed", true); return; }
        apply(res.d);
        status("live: updated " + new Date(res.d.at).toLocaleTimeString(), false);
      })
      .catch(function (err) { status("refresh failed: " + err, true); })
      .finally(function () { setTimeout(function () { poll(url); }, every); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var url = document.body.getAttribute("data-poll");
    if (url) { poll(url); }
  });
})();

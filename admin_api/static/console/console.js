// The console's only script of its own (the Content-Security-Policy allows no inline script):
// draws the overview's rate charts with uPlot from the series the live fragment carries, and
// lets "select all" tick every dead letter. Everything else is HTML and htmx attributes.
(function () {
  "use strict";
  const charts = new Map();

  function rates() {
    const holder = document.querySelector("[data-rates]");
    return holder ? JSON.parse(holder.dataset.rates) : null;
  }

  // The last minute up to now, however few points there are yet: uPlot's own range for one
  // point (or none) spans years.
  function lastMinute(u, min, max) {
    const now = Date.now() / 1000;
    return min === max || min === null ? [now - 60, now] : [min, max];
  }

  // The span a chart shows, on the figure: as a tooltip for people, in seconds for scripts.
  function shown(figure, x) {
    figure.dataset.from = String(x.min);
    figure.dataset.to = String(x.max);
    figure.title = new Date(x.min * 1000).toLocaleTimeString() + " - " + new Date(x.max * 1000).toLocaleTimeString();
  }

  function draw() {
    const series = rates();
    if (!series || typeof uPlot === "undefined") {
      return;
    }
    document.querySelectorAll("figure.chart").forEach(function (figure) {
      const name = figure.dataset.series;
      const data = [series.at, series[name]];
      let chart = charts.get(name);
      if (!chart) {
        chart = new uPlot(
          {
            width: 260,
            height: 120,
            legend: { show: false },
            scales: {
              x: { time: true, range: lastMinute },
              y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } },
            },
            series: [{}, { label: name, stroke: "#2563eb", fill: "rgba(37, 99, 235, 0.15)" }],
            axes: [{ space: 60 }, { size: 40 }],
            hooks: { setScale: [function (u, key) { if (key === "x") { shown(figure, u.scales.x); } }] },
          },
          data,
          figure
        );
        charts.set(name, chart);
      } else {
        chart.setData(data);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
  document.addEventListener("change", function (event) {
    const box = event.target;
    if (box.classList && box.classList.contains("select-all")) {
      box.form.querySelectorAll("input[name=msg_id]").forEach(function (each) {
        each.checked = box.checked;
      });
    }
  });
})();

// The console's only script of its own (the Content-Security-Policy allows no inline script):
// draws the overview's rate charts with uPlot from the series the live fragment carries, and
// lets "select all" tick every dead letter. Everything else is HTML and htmx attributes.
(function () {
  "use strict";
  const charts = new Map();

  function rates() {
    const holder = document.getElementById("rates");
    return holder ? JSON.parse(holder.dataset.rates) : null;
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
            scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
            series: [{}, { label: name, stroke: "#2563eb", fill: "rgba(37, 99, 235, 0.15)" }],
            axes: [{ space: 60 }, { size: 40 }],
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

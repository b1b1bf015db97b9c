/* Draws every [data-chart] element with the local plotly.js bundle (no framework, no CDN).
   data-chart names the id of a json_script element holding a figure dict {data, layout} that
   cluster/charts.py built; nothing is computed here. */
(function () {
  "use strict";

  function draw(element) {
    var source = document.getElementById(element.dataset.chart);
    if (!source || typeof Plotly === "undefined") {
      return;
    }
    var figure = JSON.parse(source.textContent);
    Plotly.newPlot(element, figure.data, figure.layout, { responsive: true, displaylogo: false });
  }

  function drawAll() {
    document.querySelectorAll("[data-chart]").forEach(draw);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();

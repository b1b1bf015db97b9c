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
    var chinese = document.documentElement.lang.indexOf("zh") === 0;
    var config = {
      responsive: true,
      displaylogo: false,
      // plotly's camera button downloads a PNG; this one the same chart as SVG (both drawn here, offline)
      modeBarButtonsToAdd: [{
        name: "download-svg",
        title: chinese ? "下载为 SVG 图片" : "Download plot as an SVG",
        icon: Plotly.Icons.camera,
        click: function (gd) { Plotly.downloadImage(gd, { format: "svg", filename: element.dataset.chart }); }
      }]
    };
    if (chinese) {
      config.locale = "zh-CN";  // js/plotly-locale-zh-cn.js: Chinese month and day names on date axes
    }
    Plotly.newPlot(element, figure.data, figure.layout, config).then(function () { drill(element); });
  }

  // A trace whose meta.drill lists one address per row (the board's node and pool rows) opens a row's
  // address when a cell of that row is clicked.
  function drill(element) {
    var rows = (element.data || []).map(function (trace) { return trace.meta && trace.meta.drill; });
    if (!rows.some(Boolean)) {
      return;
    }
    element.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var links = point && rows[point.curveNumber];
      var href = links && links[point.pointNumber[0]];
      if (href) {
        window.location.assign(href);
      }
    });
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

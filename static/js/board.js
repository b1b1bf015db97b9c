/* The daily board's live refresh: today's board asks its live URL every data-live-seconds for the tiles,
   timeline and node health (one JSON request, figures from the server) and swaps them in place. The
   filter form submits when the day changes. */
(function () {
  "use strict";

  function config() {
    var options = { responsive: true, displaylogo: false };
    if (document.documentElement.lang.indexOf("zh") === 0) {
      options.locale = "zh-CN";
    }
    return options;
  }

  function refresh(tiles) {
    fetch(tiles.dataset.liveUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        tiles.innerHTML = body.tiles_html;
        var health = document.getElementById("board-health");
        if (health) { health.innerHTML = body.health_html; }
        var timeline = document.getElementById("board-timeline");
        if (timeline && typeof Plotly !== "undefined") {
          Plotly.react(timeline, body.timeline.data, body.timeline.layout, config());
        }
        tiles.dataset.refreshedAt = body.computed_to;
        tiles.dispatchEvent(new CustomEvent("board:refreshed"));
      })
      .catch(function () { /* the next tick tries again */ });
  }

  function start() {
    var tiles = document.getElementById("board-tiles");
    if (tiles && tiles.dataset.liveUrl) {
      var seconds = parseInt(tiles.dataset.liveSeconds, 10) || 60;
      window.setInterval(function () { refresh(tiles); }, seconds * 1000);
      tiles.addEventListener("board:refresh-now", function () { refresh(tiles); });
    }
    var day = document.querySelector(".board-filters input[type=date]");
    if (day) {
      day.addEventListener("change", function () { day.form.submit(); });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

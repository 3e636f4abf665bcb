// Draws the run page's charts with Plotly (served by the app itself) from the series the
// server embedded in #chart-data. Progressive enhancement: without JavaScript, or if Plotly
// failed to load, the fallback text and the step table stay.
(function () {
  "use strict";

  var LABELS = {
    train_loss: "train loss", eval_loss: "eval loss", perplexity: "perplexity",
    bytes_sent: "bytes sent", rank: "rank"
  };

  function draw() {
    var source = document.getElementById("chart-data");
    if (!source || typeof Plotly === "undefined") { return; }
    var data = JSON.parse(source.textContent);
    var charts = document.querySelectorAll(".chart[data-keys]");
    for (var i = 0; i < charts.length; i++) {
      var el = charts[i];
      var traces = [];
      var keys = el.getAttribute("data-keys").split(",");
      for (var k = 0; k < keys.length; k++) {
        var series = data[keys[k]];
        if (!series || series.steps.length === 0) { continue; }
        traces.push({
          x: series.steps, y: series.values, name: LABELS[keys[k]] || keys[k],
          type: "scatter", mode: series.steps.length > 60 ? "lines" : "lines+markers"
        });
      }
      if (traces.length === 0) {
        el.querySelector(".chart-fallback").textContent = "No values recorded yet.";
        continue;
      }
      el.innerHTML = "";
      var lastStep = Math.max.apply(null, traces.map(function (t) { return t.x[t.x.length - 1]; }));
      Plotly.newPlot(el, traces, {
        margin: { l: 55, r: 10, t: 10, b: 40 },
        // Steps are whole numbers: one tick per step on short runs, Plotly's choice otherwise.
        xaxis: { title: { text: "outer step" }, dtick: lastStep <= 12 ? 1 : undefined },
        yaxis: { automargin: true },
        legend: { orientation: "h", y: -0.25 },
        height: 280
      }, { responsive: true, displaylogo: false });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();

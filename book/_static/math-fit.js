/* Fit wide display equations into the text column (loaded on every page by book/_ext/page_assets.py).
 *
 * MathJax 3 has no automatic line breaking, so a display equation wider than the column used to
 * need a horizontal scrollbar, and with an equation number beside it the number covered its end.
 * After MathJax has typeset the page, each display equation that does not fit is treated as LaTeX
 * treats a long numbered equation: its number moves below it, to the right (class
 * math-number-below, see math-fit.css); if it is still too wide, its font is scaled down until it
 * fits, but not below MIN_SCALE of its size (a narrower phone screen scrolls instead of shrinking
 * the formula to an unreadable size). Equations are fitted again when their column changes width
 * (window resized, sidebar toggled, a collapsed block opened).
 *
 * Inline math has no number to move, and a smaller font would break the line it sits in: an
 * inline formula wider than its line (on a phone) gets the class math-scroll and scrolls sideways
 * in its own box (math-fit.css; the theme used to cut it off). Refitted when its width changes.
 */
(function () {
  "use strict";
  var MIN_SCALE = 0.7;
  var SELECTOR = 'mjx-container[display="true"]';
  var INLINE = "span.math";
  var widths = new WeakMap();

  function overflows(c) {
    return c.scrollWidth > c.clientWidth + 1;
  }

  function fit(c) {
    if (c.dataset.mathFitBase === undefined) {
      c.dataset.mathFitBase = String(parseFloat(c.style.fontSize) || 100);  // MathJax's own scaling, in %
    }
    var base = parseFloat(c.dataset.mathFitBase);
    var box = c.parentElement && c.parentElement.matches("div.math") ? c.parentElement : null;
    c.style.fontSize = base + "%";
    c.classList.remove("math-fit-scaled");
    if (box) box.classList.remove("math-number-below");
    if (!c.clientWidth || !overflows(c)) return;  // hidden (fitted once shown), or fits
    if (box && box.querySelector(":scope > span.eqno")) {
      box.classList.add("math-number-below");
      if (!overflows(c)) return;
    }
    var scale = 1;
    for (var i = 0; i < 3 && overflows(c) && scale > MIN_SCALE; i++) {
      scale = Math.max(MIN_SCALE, scale * (c.clientWidth - 2) / c.scrollWidth);
      c.style.fontSize = (base * scale).toFixed(2) + "%";
    }
    c.classList.add("math-fit-scaled");
  }

  // An inline formula (span.math > mjx-container) wider than the box its line gives it scrolls.
  function fitInline(span) {
    var c = span.querySelector(":scope > mjx-container");
    span.classList.remove("math-scroll");
    if (!c || !span.clientWidth) return;  // hidden: fitted once shown
    if (c.getBoundingClientRect().width > span.clientWidth + 1) span.classList.add("math-scroll");
  }

  function fitAllInline() {
    var spans = document.querySelectorAll(INLINE);
    spans.forEach(fitInline);
    if (!window.ResizeObserver) {
      window.addEventListener("resize", function () { spans.forEach(fitInline); });
      return;
    }
    // only a change of width refits (a scrollbar that appears changes the height)
    var observer = new ResizeObserver(function (entries) {
      entries.forEach(function (entry) {
        var w = entry.target.clientWidth;
        if (widths.get(entry.target) === w) return;
        widths.set(entry.target, w);
        fitInline(entry.target);
      });
    });
    spans.forEach(function (span) {
      widths.set(span, span.clientWidth);
      observer.observe(span);
    });
  }

  function fitAll() {
    fitAllInline();
    var containers = document.querySelectorAll(SELECTOR);
    var hosted = new Map();  // element whose width bounds the equations -> those equations
    containers.forEach(function (c) {
      fit(c);
      var host = c.parentElement || c;
      if (!hosted.has(host)) hosted.set(host, []);
      hosted.get(host).push(c);
    });
    if (!window.ResizeObserver) {
      window.addEventListener("resize", function () { containers.forEach(fit); });
      return;
    }
    var observer = new ResizeObserver(function (entries) {
      entries.forEach(function (entry) {
        var w = entry.target.clientWidth;
        if (widths.get(entry.target) === w) return;  // only a change of width refits
        widths.set(entry.target, w);
        (hosted.get(entry.target) || []).forEach(fit);
      });
    });
    hosted.forEach(function (_, host) {
      widths.set(host, host.clientWidth);
      observer.observe(host);
    });
  }

  function start() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(fitAll);
    } else {
      window.addEventListener("load", function () {
        var m = window.MathJax;
        (m && m.startup && m.startup.promise ? m.startup.promise : Promise.resolve()).then(fitAll);
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// Set-up for the Jupyter widgets HTML manager (embed-amd.js, next to this file), loaded just before
// RequireJS and the manager on pages with widgets (book/_ext/local_widgets.py).
(function () {
  "use strict";
  // 1. Where the manager finds its fonts: this folder. It takes that folder from the URL RequireJS
  //    gives its module "@jupyter-widgets/html-manager/dist/libembed-amd" (a global `require`
  //    object defined before require.js loads is RequireJS's configuration), and later code of it
  //    from window.__jupyter_widgets_assets_path__.
  var here = document.currentScript.src.replace(/[?#].*$/, "").replace(/[^/]*$/, "");
  window.__jupyter_widgets_assets_path__ = here;
  window.require = {paths: {"@jupyter-widgets/html-manager/dist": here.slice(0, -1)}};

  // 2. The widgets typeset their labels with MathJax 2's MathJax.Hub.Queue(["Typeset", MathJax.Hub,
  //    element]); the book runs MathJax 3, which has no Hub, so every widget label threw "Cannot read
  //    properties of undefined (reading 'Queue')". Give MathJax 3 that one call: typeset the element
  //    once MathJax is ready (before that, MathJax's first pass typesets the whole page anyway).
  var hub = {
    Queue: function (job) {
      var mj = window.MathJax;
      if (Array.isArray(job) && job[0] === "Typeset" && job[2] && mj && mj.typesetPromise &&
          mj.startup && mj.startup.promise) {
        mj.startup.promise.then(function () { return mj.typesetPromise([job[2]]); })
          .catch(function (err) { console.warn("MathJax typeset of a widget label failed:", err); });
      }
    }
  };
  function install() {
    if (window.MathJax && !window.MathJax.Hub) window.MathJax.Hub = hub;
  }
  install();  // on MathJax's configuration object, while MathJax 3 itself is still loading
  document.addEventListener("DOMContentLoaded", install);
  window.addEventListener("load", install);
  var timer = setInterval(function () {  // MathJax 3 replaces the configuration object when it loads
    install();
    if (window.MathJax && window.MathJax.startup) clearInterval(timer);
  }, 20);
  setTimeout(function () { clearInterval(timer); }, 30000);
})();

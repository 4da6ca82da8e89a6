// Where the Jupyter widgets HTML manager (embed-amd.js, next to this file) finds its fonts: this
// folder. Loaded just before RequireJS and the manager (book/_ext/local_widgets.py). The manager
// takes the folder of its fonts from the URL RequireJS gives its module
// "@jupyter-widgets/html-manager/dist/libembed-amd"
// (a global `require` object defined before require.js loads is RequireJS's configuration), and
// later code of it from window.__jupyter_widgets_assets_path__.
(function () {
  var here = document.currentScript.src.replace(/[?#].*$/, "").replace(/[^/]*$/, "");
  window.__jupyter_widgets_assets_path__ = here;
  window.require = {paths: {"@jupyter-widgets/html-manager/dist": here.slice(0, -1)}};
})();

/* PicoBot operator dashboard: the little the pages need beyond htmx.
 * Pauses the live refresh of a listing while a row is being edited or rows are
 * selected (a refresh would throw the edit or the selection away), and shows the
 * failure of a partial update. Every page also works without this script. */
(function () {
  "use strict";
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-poll") &&
        document.querySelector("tr.editing, input.pick:checked")) {
      evt.preventDefault();
    }
  });
  document.addEventListener("htmx:responseError", function (evt) {
    var flash = document.getElementById("flash");
    if (!flash) { return; }
    flash.textContent = "The server refused the change (HTTP " + evt.detail.xhr.status +
      "); nothing was changed. Reload the page and try again.";
    flash.hidden = false;
  });
})();

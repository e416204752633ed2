// Book UI fixes (loaded on every page by book_ext.py).
//
// Sidebar toggles: pydata-sphinx-theme and sphinx-book-theme bind their click handlers to
// the FIRST `.primary-toggle` / `.secondary-toggle` in the document, a navbar button that
// the book theme hides. The visible buttons (article header) therefore did nothing, and on
// a phone the chapter list could not be opened. Forward their clicks to the bound one.
(function () {
  "use strict";

  function forward(selector) {
    const all = document.querySelectorAll(selector);
    if (all.length < 2) return;
    const bound = all[0];
    for (const btn of Array.prototype.slice.call(all, 1)) {
      btn.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }

  function init() {
    forward(".primary-toggle");
    forward(".secondary-toggle");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

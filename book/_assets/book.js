// Book UI fixes (loaded on every page by book_ext.py).
//
// Sidebar toggles: pydata-sphinx-theme and sphinx-book-theme bind their click handlers to
// the FIRST `.primary-toggle` / `.secondary-toggle` in the document, a navbar button that
// the book theme hides. The visible buttons (article header) therefore did nothing, and on
// a phone the chapter list could not be opened. Forward their clicks to the bound one.
// Also: short table labels stay on one line (markShortCells).
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

  // Table cells with a short label ("≈ 基本不变", "✓ better") keep it on one line; longer
  // text wraps inside its column (book.css gives columns a minimum width).
  function markShortCells() {
    for (const td of document.querySelectorAll(".pst-scrollable-table-container td")) {
      if (td.querySelector("code")) continue;
      const text = td.textContent.trim();
      const n = [...text].length;
      if (n && (n <= 4 || (n <= 7 && /^[✓✗≈±]/.test(text)))) td.classList.add("cell-short");
    }
  }

  function init() {
    forward(".primary-toggle");
    forward(".secondary-toggle");
    markShortCells();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

// Book UI fixes (loaded on every page by book_ext.py).
//
// Sidebar toggles: pydata-sphinx-theme and sphinx-book-theme bind their click handlers to
// the FIRST `.primary-toggle` / `.secondary-toggle` in the document, a navbar button that
// the book theme hides. The visible buttons (article header) therefore did nothing, and on
// a phone the chapter list could not be opened. Forward their clicks to the bound one.
// Also: short table labels stay on one line (markShortCells); column outputs scroll
// (markColumnOutputs).
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

  // Cell outputs laid out in columns (two or more spaces between values on most lines)
  // keep their columns and scroll sideways; prose-like outputs wrap (book.css).
  function markColumnOutputs() {
    for (const pre of document.querySelectorAll(".cell_output pre")) {
      const lines = pre.textContent.split("\n").filter((l) => l.trim());
      const aligned = lines.filter((l) => /\S {2,}\S/.test(l.trim())).length;
      if (lines.length >= 2 && aligned >= 2 && aligned >= 0.4 * lines.length) {
        pre.classList.add("output-columns");
      }
    }
  }

  function init() {
    forward(".primary-toggle");
    forward(".secondary-toggle");
    markShortCells();
    markColumnOutputs();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

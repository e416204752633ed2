/* vLLM Tuning Labs self-check grader: no kernel, no network, no dependencies.
   Mirrors course_utils.quiz.grade(): same number parsing, inclusive tolerances
   (abs and rel are alternatives), same feedback text. Inlined by quiz.html(). */
(function () {
  "use strict";
  var NUM = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
  var SEP = /[\s,_\u00a0\u3000]/g;
  var SLACK = 1e-9;

  function fill(tpl, x) { return tpl.replace("{x}", x); }

  function parseNumber(raw) {
    var s = String(raw == null ? "" : raw).replace(SEP, "");
    if (s === "") { return { empty: true }; }
    if (!NUM.test(s)) { return { bad: true }; }
    var x = Number(s);
    return isFinite(x) ? { value: x } : { bad: true };
  }

  function within(q, x) {
    var diff = Math.abs(x - q.answer);
    var slack = SLACK * Math.max(1, Math.abs(q.answer));
    if (diff <= slack) { return true; }
    if (q.abs_tol != null && diff <= q.abs_tol + slack) { return true; }
    return q.rel_tol != null && diff <= q.rel_tol * Math.abs(q.answer) + slack;
  }

  function sameSet(a, b) {
    if (a.length !== b.length) { return false; }
    for (var i = 0; i < a.length; i++) { if (b.indexOf(a[i]) < 0) { return false; } }
    return true;
  }

  function grade(q, answer, S) {
    var ok;
    if (q.type === "numeric") {
      var n = parseNumber(answer);
      if (n.empty) { return { error: S.empty_number }; }
      if (n.bad) { return { error: fill(S.bad_number, String(answer).trim()) }; }
      ok = within(q, n.value);
    } else {
      var ids = answer.filter(function (v, i) { return answer.indexOf(v) === i; });
      if (!ids.length) { return { error: S.empty_choice }; }
      if (q.type === "single" && ids.length !== 1) { return { error: S.one_choice }; }
      ok = sameSet(ids, q.correct);
    }
    var parts = [ok ? S.correct : S.wrong];
    if (q.type === "numeric" || !ok) { parts.push(fill(S.answer, q.expected)); }
    parts.push(q.explain);
    return { correct: ok, text: parts.join(S.sep) };
  }

  function escapeHtml(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function inline(s) { return escapeHtml(s).replace(/`([^`]+)`/g, "<code>$1</code>"); }

  function check(root, data, item) {
    var q = data.questions[item.id];
    if (!q) { return; }
    var answer;
    if (q.type === "numeric") {
      answer = item.querySelector("input").value;
    } else {
      answer = [];
      item.querySelectorAll("input:checked").forEach(function (el) { answer.push(el.value); });
    }
    var r = grade(q, answer, data.strings);
    var box = item.querySelector(".cu-q-feedback");
    box.hidden = false;
    box.className = "cu-q-feedback " + (r.error ? "cu-err" : (r.correct ? "cu-ok" : "cu-bad"));
    box.innerHTML = inline(r.error || r.text);
    item.setAttribute("data-result", r.error ? "error" : (r.correct ? "correct" : "wrong"));
  }

  function init(root) {
    if (!root || root.getAttribute("data-cu-ready") === "1") { return; }
    var node = root.querySelector("script.cu-quiz-data");
    if (!node) { return; }
    var data = JSON.parse(node.textContent);
    root.setAttribute("data-cu-ready", "1");
    root.addEventListener("click", function (ev) {
      var btn = ev.target.closest ? ev.target.closest("button.cu-q-check") : null;
      if (btn && root.contains(btn)) { check(root, data, btn.closest("li.cu-q")); }
    });
    root.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && ev.target.matches && ev.target.matches(".cu-q-num input")) {
        ev.preventDefault();
        check(root, data, ev.target.closest("li.cu-q"));
      }
    });
  }

  window.cuQuiz = { grade: grade, parseNumber: parseNumber, init: init };
  var me = document.currentScript;
  var root = me && me.closest ? me.closest(".cu-quiz") : null;
  if (root) {
    init(root);
  } else {
    document.querySelectorAll(".cu-quiz").forEach(init);
  }
})();

// Diagram size policy for the book's Mermaid SVGs (loaded on every page by book_ext.py).
//
// sphinxcontrib-mermaid stretches every SVG to the column width, so a tall narrow flowchart
// is blown up and a wide one shrinks to unreadable text. Here each SVG is drawn at
//   scale = min(1, column width / natural width, 0.9 * screen height / natural height),
// but never below MIN_LABEL_PX for its smallest label; what is still larger than the column
// scrolls inside its own frame. A flowchart that would scroll sideways (or be taller than
// the screen) is re-rendered in the other direction (TB <-> LR) when that fits better.
// Every diagram gets an "enlarge" button: a full-window view with zoom, offline.

const MIN_LABEL_PX = 12;
const HEIGHT_SHARE = 0.9;
const PHONE_WIDTH = 576;
const PHONE_SLACK = 1.2;
const PHONE_LABEL_PX = 10;
const ZH = (document.documentElement.lang || "").toLowerCase().startsWith("zh");
const T = ZH
  ? { enlarge: "放大", close: "关闭", zoomIn: "放大一级", zoomOut: "缩小一级", fit: "适应窗口",
      dialog: "图（放大查看）" }
  : { enlarge: "Enlarge", close: "Close", zoomIn: "Zoom in", zoomOut: "Zoom out",
      fit: "Fit to window", dialog: "Diagram (enlarged)" };
const DIR_RE = /^(\s*(?:flowchart|graph)\s+)(TB|TD|BT|LR|RL)\b/m;

let mermaidMod = null;
async function mermaidApi() {
  if (!mermaidMod) {
    const url = new URL("vendor/mermaid/mermaid.esm.min.mjs", import.meta.url);
    mermaidMod = (await import(url.href)).default;
  }
  return mermaidMod;
}

function natural(svg) {
  const vb = svg.viewBox && svg.viewBox.baseVal;
  if (vb && vb.width && vb.height) return { w: vb.width, h: vb.height };
  const r = svg.getBBox();
  return { w: r.width, h: r.height };
}

function smallestLabel(svg) {
  let min = Infinity;
  for (const t of svg.querySelectorAll("text, foreignObject span, foreignObject div, foreignObject p")) {
    if (!t.textContent.trim()) continue;
    const fs = parseFloat(getComputedStyle(t).fontSize);
    if (fs) min = Math.min(min, fs);
  }
  return Number.isFinite(min) ? min : 16;
}

function plan(nat, fontPx, availW, screenH) {
  let minScale = Math.min(1, MIN_LABEL_PX / fontPx);
  // a phone column a little narrower than the diagram: fit it (labels >= PHONE_LABEL_PX)
  // rather than scroll sideways with the scrollbar a screen below; "enlarge" shows 12 px
  if (availW < PHONE_WIDTH && nat.w * minScale <= availW * PHONE_SLACK) {
    minScale = Math.min(minScale, PHONE_LABEL_PX / fontPx);
  }
  const fit = Math.min(1, availW / nat.w, (HEIGHT_SHARE * screenH) / nat.h);
  const s = Math.max(fit, minScale);
  const hscroll = nat.w * s > availW + 1;
  const vfit = nat.h * s <= screenH;
  // 0: fits; 1: taller than the screen; 2: scrolls sideways (over: how far, in columns)
  return { s, hscroll, vfit, badness: hscroll ? 2 : vfit ? 0 : 1, over: (nat.w * s) / availW };
}

function frameOf(el) {
  let frame = el.closest(".diagram-frame");
  if (frame) return frame;
  frame = document.createElement("div");
  frame.className = "diagram-frame";
  el.parentNode.insertBefore(frame, el);
  const scroller = document.createElement("div");
  scroller.className = "diagram-scroll";
  frame.appendChild(scroller);
  scroller.appendChild(el);
  const btn = document.createElement("button");
  btn.type = "button";
  btn.className = "diagram-enlarge";
  btn.title = T.enlarge;
  btn.setAttribute("aria-label", T.enlarge);
  btn.innerHTML = '<span aria-hidden="true">⤢</span> ' + T.enlarge;
  btn.addEventListener("click", () => openOverlay(el));
  frame.appendChild(btn);
  return frame;
}

// Mermaid wraps a subgraph title at 200 px but lays the subgraph out for one line, so the
// second line hides under the first node: keep each title on one line, centred where it was.
function unwrapClusterTitles(svg) {
  for (const g of svg.querySelectorAll("g.cluster-label")) {
    const fo = g.querySelector("foreignObject");
    const div = fo && fo.firstElementChild;
    if (!div || div.dataset.unwrapped === "1") continue;
    const oldW = parseFloat(fo.getAttribute("width")) || 0;
    const oldH = parseFloat(fo.getAttribute("height")) || 0;
    for (const e of [div, ...div.querySelectorAll("*")]) {
      e.style.setProperty("white-space", "nowrap", "important");
      e.style.setProperty("max-width", "none", "important");
      e.style.setProperty("width", "auto", "important");
    }
    fo.style.setProperty("overflow", "visible");
    const range = document.createRange();
    range.selectNodeContents(div);
    const w = Math.ceil(range.getBoundingClientRect().width / (svg.getScreenCTM()?.a || 1)) + 2;
    div.dataset.unwrapped = "1";
    if (w <= oldW + 1) continue;
    fo.setAttribute("width", String(w));
    const lineH = parseFloat(getComputedStyle(div).lineHeight) || oldH;
    if (lineH && lineH < oldH) fo.setAttribute("height", String(Math.ceil(lineH) + 2));
    const m = (g.getAttribute("transform") || "").match(/translate\(\s*([-\d.]+)[ ,]+([-\d.]+)\s*\)/);
    if (m) g.setAttribute("transform", `translate(${+m[1] - (w - oldW) / 2}, ${m[2]})`);
  }
}

function applySize(el) {
  const svg = el.querySelector("svg");
  if (!svg) return null;
  unwrapClusterTitles(svg);
  const frame = frameOf(el);
  const scroller = frame.querySelector(".diagram-scroll");
  const nat = natural(svg);
  const p = plan(nat, smallestLabel(svg), scroller.clientWidth || frame.clientWidth,
    window.innerHeight);
  svg.style.setProperty("width", `${Math.round(nat.w * p.s)}px`, "important");
  svg.style.setProperty("max-width", "none", "important");
  svg.style.setProperty("height", "auto", "important");
  el.dataset.scale = p.s.toFixed(3);
  frame.classList.toggle("diagram-wide", p.hscroll);
  frame.classList.toggle("diagram-tall", !p.vfit);
  return p;
}

function sourceOf(el) {
  const raw = el.getAttribute("data-original-code");
  if (!raw) return null;
  const tmp = document.createElement("textarea");
  tmp.innerHTML = raw;
  return tmp.value;
}

let seq = 0;
async function maybeFlip(el, p) {
  if (!p || p.badness === 0 || el.dataset.flipTried === "1") return;
  el.dataset.flipTried = "1";
  const src = sourceOf(el);
  const m = src && src.match(DIR_RE);
  if (!m) return;
  const dir = m[2];
  const other = dir === "LR" || dir === "RL" ? "TB" : "LR";
  const flipped = src.replace(DIR_RE, `$1${other}`);
  const svg = el.querySelector("svg");
  const font = smallestLabel(svg);
  const availW = el.closest(".diagram-scroll").clientWidth;
  try {
    const mermaid = await mermaidApi();
    const out = await mermaid.render(`diagram-flip-${++seq}`, flipped);
    const holder = document.createElement("div");
    holder.innerHTML = out.svg;
    const nsvg = holder.querySelector("svg");
    const q = plan(natural(nsvg), font, availW, window.innerHeight);
    const better = q.badness < p.badness || (q.badness === p.badness && (q.s > p.s * 1.15
      || (q.badness === 2 && q.over < p.over * 0.6)));
    if (better) {
      el.dataset.direction = other;
      // a theme re-run (sphinxcontrib-mermaid) renders data-original-code: keep the flip
      const esc = document.createElement("div");
      esc.textContent = flipped;
      el.setAttribute("data-original-code", esc.innerHTML);
      el.innerHTML = out.svg;
      if (out.bindFunctions) out.bindFunctions(el);
    }
  } catch (e) {
    console.warn("diagram direction flip skipped:", e);
  }
}

async function size(el) {
  if (el.dataset.sizing === "1") return;
  el.dataset.sizing = "1";
  try {
    if (!el.dataset.direction) {
      const m = (sourceOf(el) || "").match(DIR_RE);
      if (m) el.dataset.direction = m[2];
    }
    const p = applySize(el);
    await maybeFlip(el, p);
    applySize(el);
    const svg = el.querySelector("svg");
    if (svg) centreOnRoot(el.closest(".diagram-scroll"), svg);
    el.dataset.sized = "1";
  } finally {
    el.dataset.sizing = "0";
  }
}

// ---- enlarged view -------------------------------------------------------------------------

// A copy of a diagram under its own id: Mermaid scopes the diagram's styles to `#<svg id>`
// (without them every shape and label is drawn black), so they move to the new id.
function enlargedCopy(svg) {
  const clone = svg.cloneNode(true);
  const id = svg.id;
  if (!id) return clone;
  const big = `${id}-enlarged`;
  clone.id = big;
  const esc = id.replace(/[^\w-]/g, (c) => `\\${c}`);
  const re = new RegExp(`#${esc}(?![\\w-])`, "g");
  for (const st of clone.querySelectorAll("style")) st.textContent = st.textContent.replace(re, `#${big}`);
  return clone;
}

// Scroll a box so that the diagram's top node is centred across (a wide tree opens at its
// root, not at its left edge).
function centreOnRoot(box, svg) {
  if (box.scrollWidth <= box.clientWidth + 1) return;
  let top = null;
  for (const n of svg.querySelectorAll("g.node")) {
    const r = n.getBoundingClientRect();
    if (r.width && (!top || r.top < top.top - 1)) top = r;
  }
  if (!top) return;
  const b = box.getBoundingClientRect();
  box.scrollLeft += (top.left + top.width / 2) - (b.left + b.width / 2);
}

let overlay = null;
function openOverlay(el) {
  const svg = el.querySelector("svg");
  if (!svg) return;
  const nat = natural(svg);
  overlay?.remove();
  overlay = document.createElement("div");
  overlay.className = "diagram-overlay";
  overlay.setAttribute("role", "dialog");
  overlay.setAttribute("aria-modal", "true");
  overlay.setAttribute("aria-label", T.dialog);
  overlay.innerHTML = `<div class="diagram-overlay-bar">
      <button type="button" data-act="out" aria-label="${T.zoomOut}" title="${T.zoomOut}">−</button>
      <button type="button" data-act="fit" aria-label="${T.fit}" title="${T.fit}">⤢</button>
      <button type="button" data-act="in" aria-label="${T.zoomIn}" title="${T.zoomIn}">+</button>
      <button type="button" data-act="close" aria-label="${T.close}" title="${T.close}">✕</button>
    </div><div class="diagram-overlay-body"></div>`;
  const body = overlay.querySelector(".diagram-overlay-body");
  const clone = enlargedCopy(svg);
  body.appendChild(clone);
  document.body.appendChild(overlay);
  const fitZoom = () => Math.max(0.25, Math.min(
    (body.clientWidth - 16) / nat.w, (body.clientHeight - 16) / nat.h, 2));
  let zoom = Math.max(fitZoom(), Math.min(1, MIN_LABEL_PX / smallestLabel(svg)));
  const draw = () => {
    clone.style.setProperty("width", `${Math.ceil(nat.w * zoom)}px`, "important");
    clone.style.setProperty("max-width", "none", "important");
    clone.style.setProperty("height", "auto", "important");
  };
  draw();
  centreOnRoot(body, clone);
  enablePan(body);
  const before = document.activeElement;
  const close = () => {
    overlay.remove();
    overlay = null;
    document.removeEventListener("keydown", onKey);
    document.documentElement.classList.remove("diagram-overlay-open");
    before?.focus?.();
  };
  const onKey = (e) => {
    if (e.key === "Escape") close();
    else if (e.key === "+" || e.key === "=") { zoom *= 1.25; draw(); }
    else if (e.key === "-") { zoom /= 1.25; draw(); }
  };
  overlay.addEventListener("click", (e) => {
    const act = e.target.closest("button")?.dataset.act;
    if (act === "close" || e.target === overlay) close();
    else if (act === "in") { zoom *= 1.25; draw(); }
    else if (act === "out") { zoom = Math.max(0.1, zoom / 1.25); draw(); }
    else if (act === "fit") { zoom = fitZoom(); draw(); }
  });
  document.addEventListener("keydown", onKey);
  document.documentElement.classList.add("diagram-overlay-open");
  overlay.querySelector('[data-act="close"]').focus();
}

// Drag to pan with a mouse (touch screens pan the scrolling box natively).
function enablePan(box) {
  let start = null;
  box.addEventListener("pointerdown", (e) => {
    if (e.pointerType !== "mouse" || e.button !== 0) return;
    start = { x: e.clientX, y: e.clientY, l: box.scrollLeft, t: box.scrollTop };
    box.classList.add("panning");
  });
  box.addEventListener("pointermove", (e) => {
    if (!start) return;
    box.scrollLeft = start.l - (e.clientX - start.x);
    box.scrollTop = start.t - (e.clientY - start.y);
  });
  const end = () => { start = null; box.classList.remove("panning"); };
  box.addEventListener("pointerup", end);
  box.addEventListener("pointerleave", end);
}

// ---- wiring --------------------------------------------------------------------------------

function watch(el) {
  // sphinxcontrib-mermaid renders asynchronously (and again on a theme change)
  const go = () => { if (el.querySelector("svg")) { el.dataset.sized = "0"; size(el); } };
  new MutationObserver((muts) => {
    if (muts.some((m) => [...m.addedNodes].some((n) => n.nodeName.toLowerCase() === "svg"))) go();
  }).observe(el, { childList: true });
  go();
}

function init() {
  document.querySelectorAll(".mermaid").forEach(watch);
  let t = null;
  window.addEventListener("resize", () => {
    clearTimeout(t);
    t = setTimeout(() => document.querySelectorAll(".mermaid").forEach((el) => {
      if (el.querySelector("svg")) applySize(el);
    }), 150);
  });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();

// Headless-Chromium page checker for the built book (driven by tests/browser_harness.py).
//
// Usage: node tools/web/browser.mjs PLAN.json  -> prints one JSON result object on stdout.
//
// PLAN = {
//   "base": "http://127.0.0.1:PORT/",          // site root (a loopback http server)
//   "chromium": "/usr/bin/chromium",            // optional
//   "screenshots": "/abs/dir",                  // optional: <name>.png per page (full page)
//   "timeout_ms": 30000,                        // optional, per page wait
//   "max_shot_px": 4000,                        // optional, screenshot height cap
//   "concurrency": 2,                           // optional, pages loaded at once
//   "pages": [{
//     "name": "zh-knobs", "path": "book/zh/knobs.html",
//     "viewport": {"width": 390, "height": 844},   // optional (default 1280 x 900)
//     "checks": ["mermaid", "cjk", "langswitch", "layout", "diagrams", "nav", "weight"],
//     "layout_widths": [390, 360],                   // optional: "layout" again at these widths
//     "screenshot": false,                           // optional: none for this page
//     "steps": [                                     // optional, run after the checks, in order
//       {"click": "css selector"}, {"fill": "css selector", "value": "text"},
//       {"wait_for": "css selector"}, {"wait_ms": 200},
//       {"eval": "JS expression (may return a promise)", "as": "key"}
//     ]
//   }]
// }
// "layout": document width vs viewport and the widest elements that stick out;
// "diagrams": per Mermaid SVG its smallest label font (px as drawn), size, enlarge control;
// "nav": prev/next links, the theme labels, the text of code cells and outputs;
// "weight": bytes the page loaded, uncompressed (the document and every resource so far).
// RESULT = {"pages": [{name, path, url, status, title, html_lang, mermaid, cjk, lang_switch,
//             layout, diagrams, nav,
//             evals, step_errors, console_errors, page_errors, screenshot}],
//           "requests": [url...], "external_requests": [url...], "bad_responses": [[status,url]...]}
// Requests that leave 127.0.0.1 are recorded and aborted (the page must not need them).
import { readFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const timeout = plan.timeout_ms ?? 30000;
const CJK = /[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]/;

const isLocal = (u) => {
  try {
    const url = new URL(u);
    if (["data:", "blob:", "about:"].includes(url.protocol)) return true;
    return url.hostname === "127.0.0.1";
  } catch {
    return false;
  }
};

const browser = await chromium.launch({
  executablePath: plan.chromium ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
  ],
});
// playwright launches with a fresh temporary --user-data-dir and removes it on close.
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const requests = [];
const external = [];
const bad = [];
await context.route("**/*", (route) => {
  const u = route.request().url();
  if (isLocal(u)) return route.continue();
  external.push(u);
  return route.abort("blockedbyclient");
});
context.on("request", (r) => requests.push(r.url()));
context.on("response", (r) => { if (r.status() >= 400) bad.push([r.status(), r.url()]); });

async function mermaidCheck(page) {
  try {
    await page.waitForFunction(() => [...document.querySelectorAll(".mermaid")].every(
      (e) => e.querySelector("svg") || e.hasAttribute("data-mermaid-render-failed")), null,
      { timeout });
  } catch { /* reported below */ }
  return page.evaluate(() => {
    const els = [...document.querySelectorAll(".mermaid")];
    const svgs = els.filter((e) => e.querySelector("svg"));
    const errors = els.filter((e) => e.hasAttribute("data-mermaid-render-failed")
      || /Syntax error|Parse error/i.test(e.textContent || "")).length;
    return { blocks: els.length, svgs: svgs.length, errors };
  });
}

async function cjkCheck(page) {
  // Tag up to 6 visible elements whose own text has CJK, then ask Chromium (CDP) which
  // platform fonts rendered their text nodes.
  const n = await page.evaluate((re) => {
    const cjk = new RegExp(re);
    let k = 0;
    const sel = "main h1, main h2, main p, main li, main td, .lang-switch-link, nav a";
    for (const el of document.querySelectorAll(sel)) {
      const own = [...el.childNodes].filter((c) => c.nodeType === 3).map((c) => c.data).join("");
      if (!cjk.test(own) || !el.getClientRects().length) continue;
      el.setAttribute("data-cjk-probe", String(k++));
      if (k >= 6) break;
    }
    return k;
  }, CJK.source);
  const cdp = await context.newCDPSession(page);
  await cdp.send("DOM.enable");
  await cdp.send("CSS.enable");
  const { root } = await cdp.send("DOM.getDocument", { depth: -1 });
  const probes = [];
  for (let i = 0; i < n; i++) {
    const { nodeId } = await cdp.send("DOM.querySelector",
      { nodeId: root.nodeId, selector: `[data-cjk-probe="${i}"]` });
    const { fonts } = await cdp.send("CSS.getPlatformFontsForNode", { nodeId });
    const text = await page.evaluate((i) => {
      const el = document.querySelector(`[data-cjk-probe="${i}"]`);
      return [...el.childNodes].filter((c) => c.nodeType === 3).map((c) => c.data).join("");
    }, i);
    const cjkChars = [...text].filter((c) => CJK.test(c) && c.trim()).length;
    const cjkGlyphs = fonts.filter((f) => /CJK/i.test(f.familyName))
      .reduce((s, f) => s + f.glyphCount, 0);
    probes.push({ text: text.trim().slice(0, 40), cjk_chars: cjkChars, cjk_glyphs: cjkGlyphs,
      fonts: fonts.map((f) => `${f.familyName}:${f.glyphCount}`) });
  }
  await cdp.detach();
  return { probes };
}

async function layoutCheck(page) {
  // the document must not be wider than the viewport; list what sticks out (outside any
  // box that scrolls on its own)
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const scrolls = (el) => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        const ox = getComputedStyle(p).overflowX;
        if (ox === "auto" || ox === "scroll" || ox === "hidden") return true;
      }
      return false;
    };
    const out = [];
    for (const el of document.querySelectorAll("main *")) {
      if (el.closest(".bd-sidebar-secondary, .bd-sidebar-primary, dialog")) continue;
      const r = el.getBoundingClientRect();
      if (r.width && r.right > vw + 1 && !scrolls(el)) {
        out.push({ tag: el.tagName.toLowerCase(), cls: String(el.className).slice(0, 60),
          right: Math.round(r.right) });
        if (out.length >= 8) break;
      }
    }
    return { viewport: window.innerWidth, client_width: vw,
      doc_width: document.documentElement.scrollWidth,
      body_width: document.body.scrollWidth, sticking_out: out };
  });
}

async function diagramsCheck(page) {
  // every Mermaid SVG: smallest label font as drawn (computed font-size x SVG scale)
  await page.waitForFunction(() => [...document.querySelectorAll(".mermaid")].every(
    (e) => e.dataset.sized === "1" || e.hasAttribute("data-mermaid-render-failed")), null,
  { timeout }).catch(() => {});
  return page.evaluate(() => [...document.querySelectorAll(".mermaid")].map((el) => {
    const svg = el.querySelector("svg");
    if (!svg) return { rendered: false };
    const r = svg.getBoundingClientRect();
    const vb = svg.viewBox && svg.viewBox.baseVal;
    const scale = vb && vb.width ? r.width / vb.width : 1;
    let min = Infinity;
    let n = 0;
    const texts = [];
    for (const t of svg.querySelectorAll("text, foreignObject span, foreignObject div, foreignObject p")) {
      if (!t.textContent.trim()) continue;
      texts.push(t.textContent.trim());
      const fs = parseFloat(getComputedStyle(t).fontSize);
      if (fs) { min = Math.min(min, fs * scale); n++; }
    }
    const frame = el.closest(".diagram-frame");
    return { rendered: true, labels: n, texts, min_font_px: n ? Math.round(min * 10) / 10 : null,
      width: Math.round(r.width), height: Math.round(r.height),
      fits_height: r.height <= window.innerHeight,
      enlarge: !!(frame && frame.querySelector("button.diagram-enlarge")),
      direction: el.dataset.direction || null };
  }));
}

async function weightCheck(page) {
  return page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const res = performance.getEntriesByType("resource").map((r) => ({
      url: r.name, bytes: r.decodedBodySize || 0 }));
    const doc = nav ? nav.decodedBodySize : 0;
    return { document: doc, total: doc + res.reduce((s, r) => s + r.bytes, 0),
      resources: res.sort((a, b) => b.bytes - a.bytes) };
  });
}

async function navCheck(page) {
  return page.evaluate(() => {
    const link = (sel) => {
      const a = document.querySelector(sel);
      return a ? { href: a.href, text: a.innerText.replace(/\s+/g, " ").trim() } : null;
    };
    const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.innerText);
    return {
      prev: link(".prev-next-area a.left-prev"), next: link(".prev-next-area a.right-next"),
      toc_title: text(".bd-toc .onthispage, .page-toc .tocsection, .bd-sidebar-secondary .onthispage"),
      search_placeholder: document.querySelector(".bd-search input, input[name=q]")?.placeholder ?? null,
      code: text(".cell .cell_input pre"),
      pre: text("main pre"),
      outputs: text(".cell .cell_output"),
      main_text: (document.querySelector("main") || document.body).innerText,
      images: [...document.querySelectorAll("main img")].map((i) => ({ alt: i.alt, src: i.src,
        width: i.getBoundingClientRect().width, natural_width: i.naturalWidth,
        caption: i.closest("figure")?.querySelector("figcaption")?.innerText.trim() ?? null })),
    };
  });
}

async function langSwitch(page) {
  const href = await page.evaluate(() => document.querySelector(".lang-switch-link")?.href ?? null);
  if (!href) return { href: null, status: null };
  const status = await page.evaluate(async (h) => (await fetch(h)).status, href);
  return { href, status };
}

async function runStep(page, step, evals) {
  if (step.click) await page.click(step.click, { timeout });
  else if (step.fill) await page.fill(step.fill, step.value ?? "", { timeout });
  else if (step.wait_for) await page.waitForSelector(step.wait_for, { timeout });
  else if (step.wait_ms) await page.waitForTimeout(step.wait_ms);
  else if (step.eval) evals[step.as ?? `eval${Object.keys(evals).length}`] =
    await page.evaluate(`(async () => (${step.eval}))()`);
  else throw new Error(`unknown step ${JSON.stringify(step)}`);
}

if (plan.screenshots) mkdirSync(plan.screenshots, { recursive: true });
async function visit(spec) {
  const page = await context.newPage();
  const vp = spec.viewport ?? { width: 1280, height: 900 };
  await page.setViewportSize(vp);
  const res = { name: spec.name, path: spec.path, console_errors: [], page_errors: [],
    evals: {}, step_errors: [] };
  page.on("console", (m) => { if (m.type() === "error") res.console_errors.push(m.text()); });
  page.on("pageerror", (e) => res.page_errors.push(String(e)));
  const url = new URL(spec.path, plan.base).href;
  res.url = url;
  const t0 = Date.now();
  const lap = (k) => { res.timing_ms[k] = Date.now() - t0; };
  res.timing_ms = {};
  try {
    const resp = await page.goto(url, { waitUntil: "load", timeout });
    res.status = resp ? resp.status() : null;
    lap("load");
    await page.waitForLoadState("networkidle", { timeout: 5000 }).catch(() => {});
    await page.evaluate(() => window.MathJax?.startup?.promise).catch(() => {});
    lap("ready");
    res.title = await page.title();
    res.html_lang = await page.evaluate(() => document.documentElement.lang);
    const checks = spec.checks ?? [];
    if (checks.includes("mermaid")) { res.mermaid = await mermaidCheck(page); lap("mermaid"); }
    if (checks.includes("cjk")) { res.cjk = await cjkCheck(page); lap("cjk"); }
    if (checks.includes("langswitch")) { res.lang_switch = await langSwitch(page); lap("lang"); }
    if (checks.includes("diagrams")) { res.diagrams = await diagramsCheck(page); lap("diagrams"); }
    if (checks.includes("layout")) { res.layout = await layoutCheck(page); lap("layout"); }
    if (checks.includes("layout") && spec.layout_widths) {
      res.layouts = {};
      for (const w of spec.layout_widths) {
        await page.setViewportSize({ width: w, height: vp.height });
        await page.waitForTimeout(250);
        res.layouts[w] = await layoutCheck(page);
      }
      await page.setViewportSize(vp);
      await page.waitForTimeout(150);
    }
    if (checks.includes("weight")) { res.weight = await weightCheck(page); lap("weight"); }
    if (checks.includes("nav")) { res.nav = await navCheck(page); lap("nav"); }
    for (const step of spec.steps ?? []) {
      try { await runStep(page, step, res.evals); } catch (e) {
        res.step_errors.push(`${JSON.stringify(step)}: ${String(e).split("\n")[0]}`);
        break;
      }
    }
    if (plan.screenshots && spec.screenshot !== false) {
      res.screenshot = join(plan.screenshots, `${spec.name}.png`);
      // full page, capped (very tall captures cost seconds each)
      const height = await page.evaluate(() => document.documentElement.scrollHeight);
      await page.screenshot({ path: res.screenshot, fullPage: true,
        clip: { x: 0, y: 0, width: vp.width, height: Math.min(height, plan.max_shot_px ?? 4000) } });
      lap("screenshot");
    }
  } catch (e) {
    res.error = String(e).split("\n")[0];
  }
  await page.close();
  return res;
}
// pages in parallel (plan.concurrency, default 2): most of a page's time is waiting (the
// network going idle, a control's animation), which another page's work can fill
const results = new Array(plan.pages.length);
let nextPage = 0;
const workers = Math.max(1, Math.min(plan.concurrency ?? 2, plan.pages.length));
await Promise.all(Array.from({ length: workers }, async () => {
  while (nextPage < plan.pages.length) {
    const i = nextPage++;
    results[i] = await visit(plan.pages[i]);
  }
}));
await context.close();
await browser.close();
process.stdout.write(JSON.stringify({ pages: results, requests: [...new Set(requests)],
  external_requests: [...new Set(external)], bad_responses: bad }, null, 1) + "\n");

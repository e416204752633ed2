"""Facts the book states, pinned to the page that states them or to course_utils.

- No page, notebook or source file names the source lessons ("seed", "种子稿", "lesson 000")
  or cites a tracker issue.
- Each lesson's main text (front matter, code, diagrams, admonitions and dropdowns aside) is at
  most 80 % of its length at commit 08e62ec, and mentions the recorded runs only in a pointer to
  the field notes.
- The corrected facts: the queue's token-budget cause, max_model_len, goodput in req/s.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from course_utils.core import diagnose, knobs

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
LANGS = ("zh", "en")
LESSONS = ("knobs", "slo-loop")

# The source lessons by name, or a tracker issue. Random seeds ("--seed", "a fixed seed",
# "随机种子") are fine, so the patterns name the lessons, not the word.
LEAK = re.compile(
    r"种子稿|(?<!随机)种子(?!数)"
    r"|\b[Tt]he seeds?(?:'s?|\s+(?:lessons?|says?|describes?|marks?|table|text|gives?|asks?)\b)"
    r"|\bseed[ -](?:000|003)\b|\blesson (?:000|003)\b|\bissue #?\d+\b")


def leak_files() -> list[Path]:
    files = [p for p in BOOK.rglob("*.md") if "_build" not in p.parts]
    files += sorted((REPO / "labs").glob("*.ipynb"))
    files += [p for p in (REPO / "src").rglob("*") if p.suffix in (".py", ".yaml", ".md")]
    return files


@pytest.mark.parametrize("text, leaks", [
    ("The seed's table says", True), ("the seed describes goodput", True),
    ("种子稿把它标为示意", True), ("Lab 02 (lesson 000 §5)", True), ("see issue 14", True),
    ("with a fixed seed", False), ("`--seed 0` by default", False), ("固定随机种子", False),
    ("varies the bench `--seed` per rate", False),
])
def test_leak_pattern_names_the_lessons_not_random_seeds(text: str, leaks: bool) -> None:
    assert bool(LEAK.search(text)) is leaks


def test_no_page_notebook_or_source_names_the_source_lessons() -> None:
    hits = []
    for path in leak_files():
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if m := LEAK.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {m.group(0)!r}")
    assert not hits, "\n".join(hits)


# ---- length of each lesson's main text -------------------------------------------------------

FENCE = re.compile(r"^(`{3,}|:{3,})")
BASELINE_COMMIT = "08e62ec"
# size(main_text(git show 08e62ec:book/<lang>/<lesson>.md)), recorded when the lessons were cut
BASELINE = {"en/knobs": 3921, "en/slo-loop": 3881, "zh/knobs": 5626, "zh/slo-loop": 5303}
MAX_SHARE = 0.80


def main_text(md: str) -> str:
    """The page without front matter and without any fenced block (code, diagrams, admonitions,
    dropdowns, version notes): what a reader reads as the lesson's running text."""
    if md.startswith("---\n"):
        md = md.split("\n---\n", 1)[1]
    out, fence = [], None
    for line in md.splitlines():
        m = FENCE.match(line.strip())
        if fence is None:
            if m:
                fence = m.group(1)
            else:
                out.append(line)
        elif line.strip() == fence:
            fence = None
    return "\n".join(out)


def size(text: str) -> int:
    """Words: each CJK character counts as one, each run of Latin letters or digits as one."""
    return len(re.findall(r"[\u4e00-\u9fff]", text)) + len(re.findall(r"[A-Za-z0-9_]+", text))


def test_main_text_drops_every_fenced_block() -> None:
    md = ("---\ntitle: x\n---\nkept words\n```{code-cell}\ncode words\n```\n"
          "````{admonition} note\n```python\nx\n```\nnote words\n````\n"
          ":::{dropdown} a\nhidden words\n:::\n中文字\n")
    assert main_text(md).split() == ["kept", "words", "中文字"]
    assert size(main_text(md)) == 2 + 3


@pytest.mark.parametrize("key", sorted(BASELINE))
def test_recorded_baseline_is_the_length_at_the_commit(key: str) -> None:
    got = subprocess.run(["git", "show", f"{BASELINE_COMMIT}:book/{key}.md"], cwd=REPO,
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"commit {BASELINE_COMMIT} not in this clone (shallow?)")
    assert size(main_text(got.stdout)) == BASELINE[key]


@pytest.mark.parametrize("key", sorted(BASELINE))
def test_lesson_main_text_is_at_most_80_percent_of_the_baseline(key: str) -> None:
    now = size(main_text((BOOK / f"{key}.md").read_text("utf-8")))
    assert now <= MAX_SHARE * BASELINE[key], f"{key}: {now} of {BASELINE[key]}"


RUN_WORDS = re.compile(r"labs/results/|recorded (?:H200 )?runs?|已录制|录好的", re.IGNORECASE)


@pytest.mark.parametrize("key", sorted(BASELINE))
def test_lessons_mention_recorded_runs_only_in_a_pointer_to_the_field_notes(key: str) -> None:
    paragraphs = re.split(r"\n\s*\n", main_text((BOOK / f"{key}.md").read_text("utf-8")))
    mentions = [p for p in paragraphs if RUN_WORDS.search(p)]
    assert mentions, "each lesson points to the field notes"
    for p in mentions:
        assert "labs/results/" not in p
        assert "field-notes.md" in p and len(p.strip().splitlines()) <= 2, p


# ---- navigation -------------------------------------------------------------------------------

def toc_files() -> dict[str, list[str]]:
    toc = yaml.safe_load((REPO / "_toc.yml").read_text("utf-8"))
    order = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return {lang: [f.split("/")[-1] for f in order if f.startswith(f"book/{lang}/")]
            for lang in LANGS}


def test_each_language_reads_lesson_then_its_lab_and_ends_with_field_notes_and_glossary() -> None:
    trees = toc_files()
    assert trees["zh"] == trees["en"]
    seq = trees["en"]
    assert seq[0] == "index" and seq[-2:] == ["field-notes", "glossary"]
    for lesson, lab in (("knobs", "lab-knob-sweep"), ("slo-loop", "lab-slo-loop")):
        assert seq.index(lab) == seq.index(lesson) + 1
    assert seq.index("autodl") < seq.index("lab-knob-sweep")
    for lang in LANGS:
        for lesson in LESSONS:
            assert "(field-notes.md)" in (BOOK / lang / f"{lesson}.md").read_text("utf-8")


# ---- corrected facts --------------------------------------------------------------------------

def page(lang: str, name: str) -> str:
    return (BOOK / lang / f"{name}.md").read_text("utf-8")


def test_queue_branch_names_a_spent_token_budget() -> None:
    leaf = diagnose.TREE["queue_budget"]
    assert isinstance(leaf, diagnose.Leaf) and leaf.constraint == "queue"
    assert [k.name for k, _ in knobs.for_constraint(leaf.knob_constraint)] == [
        "max_num_batched_tokens"]
    for lang in LANGS:
        assert "budget" in diagnose.mermaid(lang) or "预算" in diagnose.mermaid(lang)
        text = page(lang, "slo-loop")
        assert "token_budget > 0" in text and "vllm:iteration_tokens_total" in text
        assert "max_num_batched_tokens" in main_text(text)


def test_max_model_len_fits_no_more_requests_and_does_not_truncate() -> None:
    k = knobs.KNOBS["max_model_len"]
    assert "kv" not in k.relieves and "max_model_len" not in knobs.PRIORITY["kv"]
    assert knobs.validate({"max_model_len": "auto"}) == {"max_model_len": -1}
    assert "truncate_prompt_tokens" in page("en", "knobs")
    assert "truncate_prompt_tokens" in page("zh", "knobs")
    wrong = re.compile(r"more (?:sequences|requests) fit in the same pool|lets more sequences fit"
                       r"|能装下更多序列|让更多序列")
    for path in BOOK.glob("*/*.md"):
        assert not wrong.search(path.read_text("utf-8")), path


def test_goodput_is_requests_per_second_and_a_missed_p99_is_not_zero() -> None:
    assert "req/s" in page("en", "slo-loop") and "请求/秒" in page("zh", "slo-loop")
    wrong = re.compile(r"goodput[^.\n|]{0,40}\btok/s|scores? (?:0|zero)\b(?! in vLLM)"
                       r"|is worth nothing|worth nothing to the business")
    for path in BOOK.glob("*/*.md"):
        for line in path.read_text("utf-8").splitlines():
            if wrong.search(line) and "p99 gate" not in line and "does **not**" not in line:
                pytest.fail(f"{path.relative_to(REPO)}: {line.strip()[:120]}")


def test_zh_diagrams_are_chinese() -> None:
    label = re.compile(r'[\[{(]"([^"]+)"[\]})]|\|"([^"]+)"\|')
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for path in (BOOK / "zh").glob("*.md"):
        for block in re.findall(r"```\{mermaid\}\n(.*?)```", path.read_text("utf-8"), re.S):
            for m in label.finditer(block):
                text = m.group(1) or m.group(2)
                if re.search(r"[A-Za-z]{3,}", text) and not cjk.search(text):
                    words = re.findall(r"[A-Za-z]+", text)
                    if any(w.lower() not in {"ttft", "itl", "tpot", "slo", "kv", "vllm", "bench",
                                             "serve", "goodput", "metrics", "token", "seed",
                                             "temperature", "autodl", "gpu", "prefill", "decode",
                                             "p", "e", "el", "checkpoint", "cache"}
                           for w in words):
                        pytest.fail(f"{path.name}: English label {text!r}")


@pytest.mark.parametrize("lang", LANGS)
def test_expected_output_of_the_direction_map_script_matches_knobs(lang: str) -> None:
    blocks = re.findall(r"```text\n(throughput -> .*?)\n```", page(lang, "knobs"), re.S)
    want = "\n".join(f"{goal:<10} -> {[k.name for k in knobs.recommend(goal)]}"
                     for goal in ("throughput", "ttft", "itl"))
    assert blocks == [want]


def test_exercise_4_answer_matches_the_shipped_trace() -> None:
    """Lab 02's exercise 4 answer describes labs/data/chat_trace.jsonl in numbers."""
    from course_utils.core.requestlog import read_log
    from course_utils.core.workload import distribution

    path = REPO / "labs" / "data" / "chat_trace.jsonl"
    log = read_log(path.read_text(), str(path))
    d = distribution(log.requests, prefixes_known=log.prefixes_known)
    assert 1100 <= d.input_len["p50"] <= 1300 and d.input_len["p99"] > 1.5 * d.input_len["p50"]
    assert 150 <= d.output_len["p50"] <= 250 and 900 <= d.output_len["p99"] < 1000
    assert d.cv > 2.0  # "more than twice as variable as Poisson" (cv 1)
    assert round(d.prefix_share, 2) == 0.82
    en = (BOOK / "en" / "lab-slo-loop.md").read_text()
    zh = (BOOK / "zh" / "lab-slo-loop.md").read_text()
    assert "about 1,200 tokens" in en and "about 82 %" in en and "twice as variable" in en
    assert "约 1,200 个 token" in zh and "约 82%" in zh and "泊松的两倍多" in zh

"""Make a weight-free model folder for ``load_format="dummy"`` (vLLM builds random weights).

vLLM's ``--load-format dummy`` needs only ``config.json``, ``generation_config.json`` and a
tokenizer whose vocabulary covers every id below the config's ``vocab_size`` (random logits
may pick any id; an id the tokenizer lacks cannot be detokenized). The real tokenizer is
not needed: a byte-level BPE trained here on local text (the Python standard library's
source and the installed packages' by default) to exactly ``vocab_size`` ids, with the ChatML special tokens at their
real Qwen2.5 ids so ``eos_token_id`` in the config means ``<|im_end|>``.

    python -m course_utils.lab.modelfolder OUT [--model qwen2.5-7b-instruct] [--vocab-size N]

Speed, memory, KV-cache size and scheduling are those of the real architecture; the text
is noise, so quality (lab 01's accuracy) is not measured on such a folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

__all__ = [
    "SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "make_dummy_model_folder",
    "python_corpus",
    "tokenizer_ids",
    "uncovered_ids",
    "stdlib_corpus",
    "main",
]

# Qwen2.5's own ids for these (tokenizer_config.json of Qwen/Qwen2.5-7B-Instruct);
# config.json: bos_token_id 151643, eos_token_id 151645.
SPECIAL_TOKENS: dict[str, int] = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
}
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# ChatML, the format Qwen2.5 is trained on (without its tool-calling branches).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _data_dir(model: str) -> Path:
    root = resources.files("course_utils") / "data" / "models" / model
    path = Path(str(root))
    if not (path / "config.json").is_file():
        avail = sorted(
            p.name
            for p in Path(str(resources.files("course_utils") / "data" / "models")).iterdir()
            if (p / "config.json").is_file()
        )
        raise ValueError(f"no shipped config for model {model!r}; have {avail}")
    return path


def _sources(roots: Iterable[Path], max_bytes: int | None) -> Iterator[str]:
    total = 0
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir() or root in seen:
            continue
        seen.add(root)
        for path in sorted(root.rglob("*.py")):
            if root.name != "site-packages" and "site-packages" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            yield text
            total += len(text)
            if max_bytes is not None and total >= max_bytes:
                return


def stdlib_corpus(max_bytes: int | None = None) -> Iterator[str]:
    """The standard library's ``.py`` sources as text, file by file (sorted: deterministic)."""
    return _sources([Path(sysconfig.get_paths()["stdlib"])], max_bytes)


def python_corpus(max_bytes: int | None = None) -> Iterator[str]:
    """The standard library's sources, then the installed packages' (``purelib``).

    The standard library alone gives about 123k BPE merges; with the installed packages
    (a Jupyter/matplotlib environment) training reaches Qwen2.5's 151,643 regular ids.
    Ids training does not reach are filled with ``<|dummy_N|>`` tokens either way.
    """
    paths = sysconfig.get_paths()
    return _sources([Path(paths["stdlib"]), Path(paths["purelib"])], max_bytes)


def _fillers(start: int, stop: int) -> list[str]:
    return [f"<|dummy_{i}|>" for i in range(start, stop)]


def make_dummy_model_folder(
    out_dir: str | Path,
    model: str = "qwen2.5-7b-instruct",
    vocab_size: int | None = None,
    corpus: Iterable[str] | None = None,
) -> Path:
    """Write config.json, generation_config.json, tokenizer.json, tokenizer_config.json.

    ``vocab_size`` defaults to the config's (152064 for Qwen2.5-7B); a smaller one (tests)
    also rewrites it in the copied config.json. Ids below the specials that BPE training
    does not reach, and ids above them up to ``vocab_size``, are filled with
    ``<|dummy_N|>`` special tokens, so every id in ``range(vocab_size)`` decodes.
    """
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    src = _data_dir(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    target = int(vocab_size or config["vocab_size"])
    specials = dict(SPECIAL_TOKENS)
    if target <= max(specials.values()):
        # a small test vocabulary: the same three tokens, at the top of the small range
        base = target - len(specials)
        specials = {tok: base + i for i, tok in enumerate(SPECIAL_TOKENS)}
    first_special = min(specials.values())
    if sorted(specials.values()) != list(range(first_special, first_special + len(specials))):
        raise ValueError("special token ids must be consecutive")
    if target < 256 + len(specials) + 1:
        raise ValueError(f"vocab_size {target} is too small for a byte-level BPE")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=first_special,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus if corpus is not None else python_corpus(), trainer=trainer)
    trained = tok.get_vocab_size()
    if trained > first_special:
        raise RuntimeError(f"BPE grew to {trained} ids, more than {first_special}")

    def special(content: str) -> AddedToken:
        return AddedToken(
            content, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False
        )

    # ids are assigned in order of addition: fill up to the first special id, then the
    # specials at their exact ids, then fill to vocab_size
    tok.add_special_tokens([special(t) for t in _fillers(trained, first_special)])
    for name, idx in sorted(specials.items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([special(name)])
        if tok.token_to_id(name) != idx:
            raise RuntimeError(f"{name} landed at {tok.token_to_id(name)}, wanted {idx}")
    tok.add_special_tokens([special(t) for t in _fillers(first_special + len(specials), target)])
    if tok.get_vocab_size() != target:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} ids, wanted {target}")
    tok.save(str(out / "tokenizer.json"))

    added = {
        str(i): {
            "content": tok.id_to_token(i),
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i in sorted(specials.values())
    }
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(config.get("max_position_embeddings", 32768)),
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_prefix_space": False,
        "errors": "replace",
        "split_special_tokens": False,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False))

    gen_src = src / "generation_config.json"
    if target != config["vocab_size"]:
        config["vocab_size"] = target
        config["bos_token_id"] = specials["<|endoftext|>"]
        config["eos_token_id"] = specials[EOS_TOKEN]
        gen = json.loads(gen_src.read_text()) if gen_src.is_file() else {}
        gen.update(
            bos_token_id=specials["<|endoftext|>"],
            pad_token_id=specials[PAD_TOKEN],
            eos_token_id=[specials[EOS_TOKEN], specials["<|endoftext|>"]],
        )
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
        (out / "config.json").write_text(json.dumps(config, indent=2))
    else:
        shutil.copyfile(src / "config.json", out / "config.json")
        if gen_src.is_file():
            shutil.copyfile(gen_src, out / "generation_config.json")
    (out / "README.md").write_text(
        f'Weight-free model folder for vLLM `load_format="dummy"` ({model} config).\n'
        "The tokenizer is a byte-level BPE trained on local text, not the model's own:\n"
        "speed, memory and KV-cache size are real, generated text and accuracy are not.\n"
        "Made by `python -m course_utils.lab.modelfolder`.\n"
    )
    return out


def tokenizer_ids(tokenizer_json: str | Path) -> set[int]:
    """Every id a ``tokenizer.json`` can decode: ``model.vocab`` plus ``added_tokens``
    (read as JSON; no tokenizers/transformers import)."""
    data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    vocab = (data.get("model") or {}).get("vocab") or {}
    # BPE/WordPiece: {token: id}; Unigram: [[piece, score], ...] with ids 0..n-1
    ids = {int(i) for i in vocab.values()} if isinstance(vocab, dict) else set(range(len(vocab)))
    ids.update(int(t["id"]) for t in data.get("added_tokens") or [] if "id" in t)
    return ids


def uncovered_ids(
    model_dir: str | Path, tokenizer_dir: str | Path | None = None
) -> tuple[int, int] | None:
    """``(vocab_size, ids below it the tokenizer cannot decode)`` for a ``load_format="dummy"``
    folder; None when there is no ``config.json`` vocab_size or no ``tokenizer.json`` to read."""
    cfg = Path(model_dir) / "config.json"
    tok = Path(tokenizer_dir or model_dir) / "tokenizer.json"
    if not cfg.is_file() or not tok.is_file():
        return None
    config = json.loads(cfg.read_text(encoding="utf-8"))
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int):
        return None
    have = tokenizer_ids(tok)
    return size, sum(1 for i in range(size) if i not in have)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.modelfolder",
        description="Make a weight-free model folder for vLLM load_format=dummy.",
    )
    ap.add_argument("out", help="folder to write")
    ap.add_argument("--model", default="qwen2.5-7b-instruct", help="shipped config name")
    ap.add_argument("--vocab-size", type=int, default=None, help="default: the config's")
    ap.add_argument(
        "--max-corpus-mb",
        type=float,
        default=None,
        help="stop reading the Python-source corpus after this many MB",
    )
    args = ap.parse_args(argv)
    max_bytes = int(args.max_corpus_mb * 1e6) if args.max_corpus_mb else None
    out = make_dummy_model_folder(
        args.out, model=args.model, vocab_size=args.vocab_size, corpus=python_corpus(max_bytes)
    )
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"wrote {out} ({size:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

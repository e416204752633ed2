"""A weight-free model folder for ``load_format="dummy"`` (vLLM builds random weights): the
config, and a byte-level BPE trained here on local Python sources to exactly ``vocab_size``
ids (random logits may pick any id), with the family's special tokens at their real ids.
Speed, memory and KV-cache size are the real architecture's; text and accuracy are noise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

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


# Llama 3 (tokenizer_config.json of meta-llama/Meta-Llama-3-8B-Instruct): 256 special ids
# from 128000; the ones a chat uses have names, the rest are reserved_special_token_N.
LLAMA3_NAMED: dict[str, int] = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eot_id|>": 128009,
}
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Family:
    """A tokenizer family: its special tokens by id and the roles the config names."""

    specials: dict[str, int]
    eos: str
    bos: str | None  # the config's bos_token_id; tokenizer_config's bos_token if add_bos
    pad: str | None
    chat_template: str
    stop: tuple[str, ...]  # generation_config's eos_token_id list
    add_bos: bool = False


def _llama3_specials() -> dict[str, int]:
    by_id = {i: n for n, i in LLAMA3_NAMED.items()}
    reserved = (f"<|reserved_special_token_{n}|>" for n in range(256))
    return {by_id.get(i) or next(reserved): i for i in range(128000, 128256)}


QWEN2 = Family(
    dict(SPECIAL_TOKENS), EOS_TOKEN, PAD_TOKEN, PAD_TOKEN, CHAT_TEMPLATE, (EOS_TOKEN, PAD_TOKEN)
)
LLAMA3 = Family(
    _llama3_specials(),
    "<|eot_id|>",
    "<|begin_of_text|>",
    None,
    LLAMA3_CHAT_TEMPLATE,
    ("<|eot_id|>", "<|end_of_text|>"),
    add_bos=True,
)


def family_of(config: dict[str, Any]) -> Family:
    """Llama 3 for a llama config with its 128256 ids, else Qwen2.5's ChatML family."""
    if config.get("model_type") == "llama" and int(config.get("vocab_size", 0)) >= 128256:
        return LLAMA3
    return QWEN2


def _data_dir(model: str) -> Path:
    models = Path(str(resources.files("course_utils") / "data" / "models"))
    if not (models / model / "config.json").is_file():
        avail = sorted(p.name for p in models.iterdir() if (p / "config.json").is_file())
        raise ValueError(f"no shipped config for model {model!r}; have {avail}")
    return models / model


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
    """The standard library's sources, then the installed packages' (``purelib``): enough
    text for Qwen2.5's regular ids; ids training does not reach become ``<|dummy_N|>``."""
    paths = sysconfig.get_paths()
    return _sources([Path(paths["stdlib"]), Path(paths["purelib"])], max_bytes)


# an added token matched as written: no normalising, no stripping, inside words too
_PLAIN = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


def _source_config(model: str, config: str | Path | None) -> tuple[dict[str, Any], Path | None]:
    """The config.json to copy (a shipped model's, or a given file/folder) and its
    generation_config.json when there is one."""
    if config is None:
        cfg_path = _data_dir(model) / "config.json"
    else:
        cfg_path = Path(config)
        if cfg_path.is_dir():
            cfg_path = cfg_path / "config.json"
        if not cfg_path.is_file():
            raise ValueError(f"no config.json at {config}")
    gen = cfg_path.parent / "generation_config.json"
    return json.loads(cfg_path.read_text()), gen if gen.is_file() else None


def _placed_specials(fam: Family, target: int) -> dict[str, int]:
    """The family's specials at their real ids, or (a small test vocabulary) the same
    tokens in the same order at the top of the range."""
    specials = dict(fam.specials)
    if target <= max(specials.values()):
        base = target - len(specials)
        ordered = sorted(specials, key=lambda n: specials[n])
        specials = {tok: base + i for i, tok in enumerate(ordered)}
    return specials


def _train_tokenizer(corpus: Iterable[str] | None, specials: dict[str, int], target: int) -> Any:
    """A byte-level BPE trained up to the first special id, then every id to ``target``:
    ``<|dummy_N|>`` fillers below the specials and above them, specials at their ids."""
    import tokenizers as tk

    first_special = min(specials.values())
    if target < 256 + len(specials) + 1:
        raise ValueError(f"vocab_size {target} is too small for a byte-level BPE")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = tk.decoders.ByteLevel()
    tok.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(
        vocab_size=first_special,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus if corpus is not None else python_corpus(), trainer=trainer)
    trained = tok.get_vocab_size()
    if trained > first_special:
        raise RuntimeError(f"BPE grew to {trained} ids, more than {first_special}")

    # ids are assigned in order of addition
    by_id = {i: n for n, i in specials.items()}
    names = [by_id.get(i) or f"<|dummy_{i}|>" for i in range(trained, target)]
    tok.add_special_tokens([tk.AddedToken(t, special=True, **_PLAIN) for t in names])
    for name, idx in specials.items():
        if tok.token_to_id(name) != idx:
            raise RuntimeError(f"{name} landed at {tok.token_to_id(name)}, wanted {idx}")
    if tok.get_vocab_size() != target:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} ids, wanted {target}")
    return tok


def _copy_tokenizer(src: Path, out: Path, specials: dict[str, int], target: int) -> None:
    """Reuse another dummy folder's tokenizer (same ids, same specials): no training."""
    have = tokenizer_ids(src / "tokenizer.json")
    if have != set(range(target)):
        raise ValueError(f"{src}: its tokenizer does not cover exactly {target} ids")
    data = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in data.get("added_tokens") or []}
    if any(added.get(n) != i for n, i in specials.items()):
        raise ValueError(f"{src}: its special tokens are not this model's")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / name, out / name)


def make_dummy_model_folder(
    out_dir: str | Path,
    model: str = "qwen2.5-7b-instruct",
    vocab_size: int | None = None,
    corpus: Iterable[str] | None = None,
    config: str | Path | None = None,
    tokenizer_from: str | Path | None = None,
) -> Path:
    """Write config.json, generation_config.json and a tokenizer decoding every id below
    ``vocab_size`` (default: the config's; a smaller one is written into config.json). The
    config is a shipped ``model``'s or any ``config`` file/folder; ``tokenizer_from`` copies
    another dummy folder's tokenizer (same ids and specials) instead of training one."""
    cfg, gen_src = _source_config(model, config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fam = family_of(cfg)
    orig_vocab = int(cfg["vocab_size"])
    target = int(vocab_size or orig_vocab)
    specials = _placed_specials(fam, target)
    if tokenizer_from is not None:
        _copy_tokenizer(Path(tokenizer_from), out, specials, target)
    else:
        tok = _train_tokenizer(corpus, specials, target)
        tok.save(str(out / "tokenizer.json"))
        _write_tokenizer_config(out, fam, specials, cfg)
    if target != orig_vocab:
        cfg["vocab_size"] = target
        cfg["bos_token_id"] = specials[fam.bos or fam.eos]
        cfg["eos_token_id"] = specials[fam.eos]
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if gen_src is not None and target == orig_vocab:
        shutil.copyfile(gen_src, out / "generation_config.json")
    else:  # the ids of this (possibly smaller) vocabulary
        gen = json.loads(gen_src.read_text()) if gen_src is not None else {}
        gen.update(bos_token_id=cfg["bos_token_id"], eos_token_id=[specials[s] for s in fam.stop])
        if fam.pad:
            gen["pad_token_id"] = specials[fam.pad]
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    name = model if config is None else Path(config).name
    (out / "README.md").write_text(
        f'Weight-free model folder for vLLM `load_format="dummy"` ({name} config).\n'
        "The tokenizer is a byte-level BPE trained on local text, not the model's own:\n"
        "speed, memory and KV-cache size are real, generated text and accuracy are not.\n"
        "Made by `python -m course_utils modelfolder`.\n"
    )
    return out


def _write_tokenizer_config(
    out: Path, fam: Family, specials: dict[str, int], cfg: dict[str, Any]
) -> None:
    named = {n: i for n, i in specials.items() if not n.startswith("<|reserved_special")}
    added = {
        str(i): {"content": n, **_PLAIN, "special": True}
        for n, i in sorted(named.items(), key=lambda kv: kv[1])
    }
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(cfg.get("max_position_embeddings", 32768)),
        "bos_token": fam.bos if fam.add_bos else None,
        "eos_token": fam.eos,
        "pad_token": fam.pad,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": fam.add_bos,
        "add_prefix_space": False,
        "errors": "replace",
        "split_special_tokens": False,
        "added_tokens_decoder": added,
        "chat_template": fam.chat_template,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False))


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


def _cmd(args: argparse.Namespace) -> int:
    from course_utils.core.validate import BadInput

    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput(f"{out_dir} is a file, not a folder", "give a new folder path")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise BadInput(
            f"{out_dir} is not empty (a model folder is never written over)",
            "use that folder as it is, or give a new one",
        )
    if args.config is not None and not Path(args.config).exists():
        raise BadInput(f"--config {args.config}: no such file or folder", "give a config.json")
    tok_from = args.tokenizer_from
    if tok_from is not None and not (Path(tok_from) / "tokenizer.json").is_file():
        what = f"--tokenizer-from {tok_from}: no tokenizer.json there"
        raise BadInput(what, "give a folder this command wrote")
    max_bytes = int(args.max_corpus_mb * 1e6) if args.max_corpus_mb else None
    try:
        out = make_dummy_model_folder(
            args.out,
            model=args.model,
            vocab_size=args.vocab_size,
            corpus=python_corpus(max_bytes),
            config=args.config,
            tokenizer_from=args.tokenizer_from,
        )
    except (KeyError, json.JSONDecodeError) as exc:
        raise BadInput(
            f"--config/--model: not a model config ({exc})", "give a config.json"
        ) from None
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"wrote {out} ({size:.1f} MB)")
    return 0


def add_cli(subparsers: Any) -> None:
    """Register `modelfolder`: a weight-free model folder for load_format=dummy."""
    from course_utils.core.validate import positive_float, positive_int

    ap = subparsers.add_parser(
        "modelfolder", help="make a weight-free model folder for vLLM load_format=dummy"
    )
    ap.add_argument("out", help="folder to write (new or empty)")
    ap.add_argument("--model", default="qwen2.5-7b-instruct", help="shipped config name")
    ap.add_argument("--config", default=None, help="any config.json (or its folder) instead")
    ap.add_argument("--tokenizer-from", default=None, help="copy this dummy folder's tokenizer")
    ap.add_argument("--vocab-size", type=positive_int, default=None, help="default: the config's")
    ap.add_argument(
        "--max-corpus-mb",
        type=positive_float,
        default=None,
        help="stop reading the Python-source corpus after this many MB",
    )
    ap.set_defaults(func=_cmd)

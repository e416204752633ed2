"""The weight-free model folder for load_format=dummy: vocabulary coverage and special ids."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
import tokenizers  # noqa: E402 - requirements.txt installs it: a missing one fails

from course_utils.__main__ import main as course_main
from course_utils.lab import modelfolder
from course_utils.lab.modelfolder import SPECIAL_TOKENS, make_dummy_model_folder, stdlib_corpus

FILES = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}


def _render(template: str, messages: list[dict[str, str]]) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def test_small_vocab_covers_every_id(tmp_path: Path) -> None:
    out = make_dummy_model_folder(tmp_path / "m", vocab_size=1000, corpus=stdlib_corpus(300_000))
    assert FILES <= {p.name for p in out.iterdir()}
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 1000
    assert all(tok.id_to_token(i) is not None for i in range(1000))
    assert tok.id_to_token(1000) is None
    # every id decodes (what a detokenizer does with random logits)
    for i in range(0, 1000, 7):
        assert isinstance(tok.decode([i], skip_special_tokens=False), str)
    # the config is rewritten to the small vocabulary, eos = <|im_end|>
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["vocab_size"] == 1000
    assert tok.id_to_token(cfg["eos_token_id"]) == "<|im_end|>"
    gen = json.loads((out / "generation_config.json").read_text())
    assert tok.id_to_token(gen["eos_token_id"][0]) == "<|im_end|>"
    # byte-level: any text round-trips
    text = "def f(x):\n    return x * 2  # 你好, café"
    assert tok.decode(tok.encode(text).ids) == text


def test_full_qwen_vocab_has_specials_at_real_ids(tmp_path: Path) -> None:
    # a tiny corpus keeps this fast: ids that training does not reach are filled
    out = make_dummy_model_folder(tmp_path / "q", corpus=stdlib_corpus(200_000))
    cfg = json.loads((out / "config.json").read_text())
    shipped = json.loads(
        (Path(modelfolder.__file__).parents[1] / "data/models/qwen2.5-7b-instruct/config.json")
        .read_text()
    )
    assert cfg == shipped  # copied unchanged
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == cfg["vocab_size"] == 152064
    for name, idx in SPECIAL_TOKENS.items():
        assert tok.token_to_id(name) == idx
    assert tok.id_to_token(cfg["eos_token_id"]) == "<|im_end|>"
    assert tok.id_to_token(cfg["bos_token_id"]) == "<|endoftext|>"
    missing = [i for i in range(cfg["vocab_size"]) if tok.id_to_token(i) is None]
    assert missing == []
    ids = [151642, 151643, 151644, 151645, 151646, 152063]
    assert isinstance(tok.decode(ids, skip_special_tokens=True), str)
    # the chat markers encode to one id each
    enc = tok.encode("<|im_start|>user\nhi<|im_end|>").ids
    assert enc[0] == 151644 and enc[-1] == 151645


def test_tokenizer_config_and_chat_template(tmp_path: Path) -> None:
    out = make_dummy_model_folder(tmp_path / "m", vocab_size=600, corpus=stdlib_corpus(100_000))
    conf = json.loads((out / "tokenizer_config.json").read_text())
    assert conf["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert conf["eos_token"] == "<|im_end|>"
    prompt = _render(conf["chat_template"], [{"role": "user", "content": "2+2?"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = _render(
        conf["chat_template"],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
    )
    assert with_system.startswith("<|im_start|>system\nS<|im_end|>\n")
    assert "helpful assistant" not in with_system


def test_rejects_unknown_model_and_tiny_vocab(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no shipped config"):
        make_dummy_model_folder(tmp_path / "x", model="no-such-model", vocab_size=600)
    with pytest.raises(ValueError, match="too small"):
        make_dummy_model_folder(tmp_path / "y", vocab_size=100, corpus=["abc"])


def test_cli_writes_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = course_main(["modelfolder", str(tmp_path / "cli"), "--vocab-size", "700",
                      "--max-corpus-mb", "0.2"])
    assert rc == 0
    assert "wrote" in capsys.readouterr().out
    tok = tokenizers.Tokenizer.from_file(str(tmp_path / "cli" / "tokenizer.json"))
    assert tok.get_vocab_size() == 700

"""The tokenizer from Python: the CLI's tokenize / detokenize, and text wherever token ids go."""

import json

import pytest

from conftest import TEST_DATA, ids, run_cli, same_bits

TEXT = "Once upon a time, the café had 12 tables."


def test_builtin_tokenizer_equals_cli(tiny_plain):
    tok = tiny_plain.tokenizer
    assert tok is not None and tok.vocab_size <= tiny_plain.vocab_size
    got = tok.encode(TEXT)
    assert got == json.loads(run_cli("tokenize", "builtin:tiny", "--text", TEXT).stdout)
    assert tok.decode(got) == run_cli("detokenize", "builtin:tiny", "--tokens", ids(got)).stdout.rstrip("\n")


def test_hugging_face_fixture_ids(parity):
    # tests/data/tokenizer_bpe: ids made by Hugging Face `tokenizers` (tools/make_tokenizer_fixture.py).
    folder = TEST_DATA / "tokenizer_bpe" / "neox"
    tok = parity.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cases = json.loads((folder / "fixture.json").read_text())["cases"]
    assert len(cases) > 10
    for c in cases:
        assert tok.encode(c["text"]) == c["ids"], c["text"]
        assert tok.encode(c["text"], add_special_tokens=False) == c["ids_no_special"], c["text"]
        assert tok.decode(c["ids"]) == c["decoded"], c["text"]
        assert tok.decode(c["ids"], skip_special_tokens=True) == c["decoded_skip_special"], c["text"]


def test_text_prompts_equal_cli_generate(parity):
    llm = parity.LLM("builtin:tiny", exact=True, threads=2)
    cli = json.loads(run_cli("generate", "builtin:tiny", "--prompt-text", TEXT, "--forced-text", " and more",
                             "--exact", "--threads", 2).stdout)
    o = llm.generate(TEXT, forced=" and more")[0]
    assert o.prompt_token_ids == llm.tokenizer.encode(TEXT)
    assert o.token_ids == cli["tokens"] == llm.tokenizer.encode(" and more", add_special_tokens=False)
    assert o.text == cli["text"]
    free = llm.generate([TEXT, "Hello"], max_tokens=5)
    assert free[1].prompt_token_ids == llm.tokenizer.encode("Hello")
    assert free[0].text == llm.tokenizer.decode(free[0].token_ids, skip_special_tokens=True)
    assert same_bits(llm.score(TEXT), llm.score(llm.tokenizer.encode(TEXT)))
    c = llm.capture(["Hello", TEXT], ["lm_head"], forced=["!", "?"])
    assert c.prompts[0].prompt_token_ids == llm.tokenizer.encode("Hello")


def test_model_without_tokenizer(parity):
    llm = parity.LLM(str(TEST_DATA / "mamba2_g1"))
    assert llm.tokenizer is None
    with pytest.raises(parity.Error, match="generate: prompts: text needs the model's tokenizer: .*no tokenizer.json"):
        llm.generate("hello", max_tokens=2)
    assert llm.generate([1, 2, 3], max_tokens=2)[0].text is None
    with pytest.raises(parity.Error, match="no tokenizer.json"):
        parity.load_tokenizer(str(TEST_DATA / "mamba2_g1"))


def test_bad_tokenizer_input(parity, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "WordPiece", "vocab": {}}}')
    with pytest.raises(parity.Error, match="WordPiece"):
        parity.Tokenizer.from_file(str(bad))
    with pytest.raises(parity.Error, match="cannot open|No such file"):
        parity.Tokenizer.from_file(str(tmp_path / "missing.json"))

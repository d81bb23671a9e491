#!/usr/bin/env python3
"""Makes the tokenizer fixtures in tests/data/tokenizer_bpe/ with Hugging Face `tokenizers`.

Three small byte-level BPE tokenizers are trained on a text generated here (no download), each shaped
like a family parity serves, and saved with the ids and decodes HF produces for a list of tricky
strings, so that parity's tokenizer (src/tokenizer/) can be checked against HF id for id:

  neox/     GPT-NeoX / Mamba2 style: NFC normalizer, ByteLevel pre-tokenizer (GPT-2 regex), merges in
            the legacy "a b" string form, added tokens <|endoftext|> <|padding|> (special), "  " and
            "    " (non-special, normalized, as NeoX's whitespace tokens), <mask> (special, lstrip),
            "ok" (non-special, single_word) and <|note|> (non-special, rstrip).
  granite/  Granite style: Split with the cl100k-like regex (Isolated) + ByteLevel(use_regex=false),
            no normalizer, merges in the ["a","b"] pair form, TemplateProcessing that prepends
            <|begin_of_text|>, chat template in chat_template.jinja.
  digits/   StarCoder / Granite-3 style: Sequence[Digits(individual), ByteLevel(add_prefix_space)].
  behaviors/ neox's model and added tokens behind a Sequence of Splits with every behavior
            (merged_with_previous, merged_with_next, contiguous, removed, invert, a String
            pattern), Digits(contiguous) and ByteLevel(use_regex=false): not a real model's shape,
            it pins down the split rules.

Each folder gets tokenizer.json, tokenizer_config.json (eos, bos, chat template where it lives there)
and fixture.json: {"tokenizers_version", "vocab_size", "eos_token_id", "bos_token_id", "cases":
[{"text", "ids", "ids_no_special", "decoded", "decoded_skip_special"}], "decode_cases": [{"ids",
"decoded", "decoded_skip_special"}]}. Decodes are tokenizers' own Tokenizer.decode (no
transformers clean-up of spaces).

Deterministic: training runs twice and the two results must agree byte for byte; random cases
come from a seeded generator. Needs only `tokenizers`:

    python3 tools/make_tokenizer_fixture.py --out tests/data/tokenizer_bpe
"""
import argparse
import json
import os
import random
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import AddedToken, Regex, Tokenizer, __version__ as TOKENIZERS_VERSION  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

GRANITE_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = ("{% for message in messages %}<|start|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|endoftext|>\n{% endfor %}{% if add_generation_prompt %}<|start|>assistant\n{% endif %}")

WORDS = ("the of and to in is that it was for on are as with his they at be this from have or by one had "
         "not but what all were when we there can an your which their said if do will each about how up "
         "out them then she many some so these would other into has more her two like him see time could "
         "no make than first been its who now people my made over did down only way find use may water "
         "long little very after words called just where most know state model token tokenizer parity "
         "inference engine mamba granite hybrid exact numerics kernel batch request stream decode encode "
         "don't can't it's we're they've I'm you'll she'd").split()

UNICODE_SNIPPETS = ["café", "naïve", "résumé", "Ærøskøbing", "straße", "İstanbul", "日本語のテキスト", "中文分词",
                    "한국어 문장", "Привет мир", "Γειά σου", "مرحبا", "שלום", "हिन्दी", "ไทย", "🙂", "👩‍💻",
                    "🇫🇷", "e\u0301", "\u00a0", "\u3000", "½", "²", "٣٤٥", "Ⅻ"]


def training_text(seed):
    """About 200 KB of deterministic pseudo-prose with numbers, code and some Unicode."""
    rng = random.Random(seed)
    lines = []
    for i in range(2500):
        n = rng.randint(4, 18)
        ws = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            ws.insert(rng.randrange(len(ws) + 1), str(rng.randint(0, 99999)))
        if rng.random() < 0.2:
            ws.insert(rng.randrange(len(ws) + 1), rng.choice(UNICODE_SNIPPETS))
        s = " ".join(ws)
        s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ":", ";"])
        if rng.random() < 0.1:
            s = "    def f_%d(x):\n        return x * %d\n" % (i, rng.randint(2, 9)) + s
        if rng.random() < 0.1:
            s += "\n\n"
        elif rng.random() < 0.1:
            s += "\t"
        lines.append(s)
    return lines


def train(kind, vocab_size):
    tok = Tokenizer(models.BPE())
    specials = ["<|endoftext|>", "<|padding|>"]
    if kind == "neox":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    elif kind == "granite":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=Regex(GRANITE_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        specials = ["<|end_of_text|>", "<|begin_of_text|>", "<|start|>"]
    elif kind == "digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)])
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    else:
        raise ValueError(kind)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(1234), trainer=trainer)
    if kind == "neox":
        tok.add_tokens([AddedToken("    ", normalized=True), AddedToken("  ", normalized=True),
                        AddedToken("ok", single_word=True, normalized=True),
                        AddedToken("<|note|>", rstrip=True, normalized=False)])
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    elif kind == "granite":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", bos)])
    elif kind == "digits":
        tok.add_tokens([AddedToken("<|note|>", normalized=False)])
    return tok


def behaviors_variant(neox_text):
    tok = Tokenizer.from_str(neox_text)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(r"\s+"), behavior="merged_with_previous"),
        pre_tokenizers.Split(pattern="-", behavior="merged_with_next"),
        pre_tokenizers.Split(pattern=Regex(r"\p{P}"), behavior="contiguous", invert=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(pattern=Regex(r"x|(?=q)"), behavior="removed"),
        pre_tokenizers.Split(pattern=Regex(r"\w+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    return tok


def to_json(tok, merges_as_strings):
    doc = json.loads(tok.to_str())
    merges = doc["model"]["merges"]
    if merges_as_strings:
        doc["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in merges]
    else:
        doc["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in merges]
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def tricky_strings(added):
    s = [
        "", " ", "  ", "   ", "     ", "\t", "\n", "\n\n\n", "\r\n", " \t \n ", "trailing spaces   ",
        "   leading spaces", "tabs\tbetween\t\twords", "line one\nline two\n\n  indented\n",
        "Hello, world!", "hello world", "HELLO WORLD", "The quick brown fox jumps over the lazy dog.",
        "don't can't won't it's we're they've I'm you'll she'd", "DON'T IT'S WE'RE 'S 'T 'RE", "'s't're",
        "rock 'n' roll", "''''", "0", "12", "123", "1234567890", "3.14159 2,718 1e-10 0x1F -42 +7",
        "year 2024, page 12345678", "٣٤٥ ²³ ½ Ⅻ ①②", "café naïve résumé", "cafe\u0301 nai\u0308ve",
        "e\u0301\u0301\u0301", "\u1100\u1161\u11a8 한국어", "Ω Å K", "straße STRASSE ẞ", "İstanbul ıi",
        "ſ 'ſ 'ſ", "日本語のテキストです。", "中文分词测试，标点！", "Привет, мир!", "Γειά σου Κόσμε",
        "مرحبا بالعالم", "שלום עולם", "हिन्दी पाठ", "ภาษาไทย", "🙂", "🙂🙃😀", "a🙂b",
        "👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈", "🇫🇷🇯🇵", "👍🏽", "\u200d", "\u200b zero\u200bwidth", "\ufeffBOM",
        "nbsp\u00a0here", "ideographic\u3000space", "nel\u0085next", "line\u2028sep\u2029para",
        "ogham\u1680space", "mongolian\u180evowel \u180e ", "thin\u2009space", "\x00nul\x01ctl\x7f", "\U0010ffff\ue000", "\\ back\\slash",
        "<html><body class=\"x\">a &amp; b</body></html>", "def f(x):\n    return x ** 2\n",
        "    four-space indent", "        eight", "\t\tdouble tab", "a  b   c    d     e",
        "ok", "ok then", "look okay ok.", "book ok", "(ok)", "_ok_",
    ]
    for a in added:
        s += [a, "x" + a + "y", " " + a + " ", "a " + a + "  b", a + a, "  " + a + "\n" + a + "end"]
    return s


def random_strings(rng, added, count):
    pool = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789'\".,!?-_:/()") + [
        " ", " ", " ", "  ", "\t", "\n", "\r\n", "\u0085", "\u180e", "\u00a0", "\u2028", "\u3000", "é", "e\u0301",
        "ñ", "日本", "語", "한국어", "\u1100\u1161", "🙂", "👩‍💻", "🇫🇷", "\u200d", "ß", "İ", "ſ", "'S",
        "'LL", "'ve", "٣", "²", "½", "Ⅻ", "\ufeff", "\x00", "the", " the", "token", " model"] + list(added)
    out = []
    for _ in range(count):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 30))))
    return out


def long_input(rng):
    """About 50 KB: prose, a 6 KB run of one letter, long digit and whitespace runs, CJK, emoji."""
    parts = []
    while sum(len(p.encode()) for p in parts) < 40000:
        parts.append(" ".join(rng.choice(WORDS + UNICODE_SNIPPETS) for _ in range(rng.randint(5, 40))))
        parts.append(rng.choice([". ", "\n", "\n\n", "  ", "\t", "! "]))
    parts.append("a" * 6000)
    parts.append(" " + "9" * 1000 + " " * 1000 + "\n" * 200 + "日本語" * 300 + "🙂" * 100)
    return "".join(parts)


def fixture_for(tok, added, seed):
    rng = random.Random(seed)
    texts = tricky_strings(added) + random_strings(rng, added, 300) + [long_input(rng)]
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=True).ids
        cases.append({
            "text": t,
            "ids": ids,
            "ids_no_special": tok.encode(t, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    vocab = tok.get_vocab_size(with_added_tokens=True)
    decode_cases = []
    # Single byte tokens of multi-byte characters, alone and in pairs: lossy UTF-8 decoding.
    byte_tokens = [tok.token_to_id(c) for c in pre_tokenizers.ByteLevel.alphabet()]
    byte_tokens = sorted(i for i in byte_tokens if i is not None)
    for _ in range(200):
        n = rng.randint(1, 12)
        if rng.random() < 0.5:
            ids = [rng.choice(byte_tokens) for _ in range(n)]
        else:
            ids = [rng.randrange(vocab) for _ in range(n)]
        decode_cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                             "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return cases, decode_cases


def build(kind, vocab_size):
    tok = train(kind, vocab_size)
    again = train(kind, vocab_size)
    if tok.to_str() != again.to_str():
        sys.exit("training is not deterministic for %s: refusing to write a fixture" % kind)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/tokenizer_bpe")
    args = ap.parse_args()
    specs = {
        # kind: (vocab size, merges as strings, added-token contents used in cases, eos, bos, template file)
        "neox": (1500, True, ["<|endoftext|>", "<|padding|>", "    ", "  ", "ok", "<|note|>", "<mask>"],
                 "<|endoftext|>", None, False),
        "granite": (1200, False, ["<|end_of_text|>", "<|begin_of_text|>", "<|start|>"],
                    "<|end_of_text|>", "<|begin_of_text|>", True),
        "digits": (1000, True, ["<|endoftext|>", "<|note|>"], "<|endoftext|>", None, False),
        "behaviors": (None, True, ["<|endoftext|>", "<|padding|>", "    ", "  ", "ok", "<|note|>", "<mask>"],
                      "<|endoftext|>", None, False),
    }
    texts = {}
    for seed, (kind, (vocab_size, as_strings, added, eos, bos, template_file)) in enumerate(specs.items()):
        tok = behaviors_variant(texts["neox"]) if kind == "behaviors" else build(kind, vocab_size)
        text = texts[kind] = to_json(tok, as_strings)
        tok = Tokenizer.from_str(text)  # the ids below come from exactly the file written
        folder = os.path.join(args.out, kind)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "eos_token": eos}
        if bos:
            config["bos_token"] = bos
        if template_file:
            with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(CHAT_TEMPLATE.replace("<|endoftext|>", "<|end_of_text|>"))
        else:
            config["chat_template"] = CHAT_TEMPLATE
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2, sort_keys=True)
            f.write("\n")
        cases, decode_cases = fixture_for(tok, added, 100 + seed)
        fixture = {
            "tokenizers_version": TOKENIZERS_VERSION,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "eos_token_id": tok.token_to_id(eos),
            "bos_token_id": tok.token_to_id(bos) if bos else None,
            "cases": cases,
            "decode_cases": decode_cases,
        }
        with open(os.path.join(folder, "fixture.json"), "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            f.write("\n")
        print("%s: vocab %d, %d cases, %d decode cases -> %s" %
              (kind, fixture["vocab_size"], len(cases), len(decode_cases), folder))


if __name__ == "__main__":
    main()

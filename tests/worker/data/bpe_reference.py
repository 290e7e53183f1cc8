#!/usr/bin/env python3
"""Reference ids for bpe_reference_test.cc (and tokenizer_bench.cc).

Trains tiny byte-level BPE tokenizers with the pinned Hugging Face `tokenizers`
library (scripts/reference-venv) on a seeded multilingual corpus, in the styles
of the models users fine-tune:

  gpt2     ByteLevel pre-tokenizer with GPT-2's regex, <|endoftext|>
  llama3   Split(Llama 3's pattern) + ByteLevel(use_regex=False), ignore_merges,
           Llama 3's special tokens and a TemplateProcessing post-processor
  qwen2    NFC normalizer + Split(Qwen2's pattern) + ByteLevel(use_regex=False),
           ChatML special tokens and a normalized (non-special) added token
  roberta  ByteLevel(add_prefix_space=True) and added tokens with lstrip,
           rstrip and single_word set, the flags the other three leave off

then saves each tokenizer.json and writes what the library makes of a held-out
corpus: reference.json holds the test strings, and for each style the ids of
every string (Tokenizer.encode(text, add_special_tokens=False).ids), the
decoded text (skip_special_tokens=False), the string after the normalizer, and
the ids of heldout.txt encoded as one string. Nothing is downloaded: the
tokenizers are trained here, and everything is seeded.

  bpe_reference.py --out DIR [--lines N] [--styles gpt2,llama3,...] [--bench]

With --bench (bench/data/tokenizer_bench.cc) it writes, instead of
reference.json, each style's ids of heldout.txt (STYLE.ids, uint32
little-endian) and bench.json: the library's best time of three to encode the
file as one string (one thread) and its lines with encode_batch (all cores).
"""

import argparse
import array
import json
import os
import random
import sys
import time
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

# The split patterns of the real tokenizer.json files, as transformers'
# convert_slow_tokenizer.py and models/qwen2/tokenization_qwen2.py write them.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = {
    "en": ["the", "model", "learns", "tokens", "from", "text", "and", "it", "is", "a", "good",
           "day", "Hello", "World", "Training", "data", "GPU", "loss", "fell", "quickly"],
    "contractions": ["it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "IT'S",
                     "DON'T", "We'Re", "YOU'LL", "O'Neil", "rock'n'roll", "'tis", "it'ſ",
                     "''s", "'", "'ſome"],
    "fr": ["café", "élève", "naïve", "garçon", "à", "où", "Noël", "déjà", "Œuvre"],
    "de": ["Straße", "Größe", "Ärger", "über", "Fußgänger"],
    "ru": ["Привет", "мир", "ёжик", "Москва", "обучение", "модели"],
    "el": ["Καλημέρα", "κόσμε", "Ελληνικά"],
    "ar": ["مرحبا", "بالعالم", "تعلم", "الآلة", "١٢٣٤"],
    "he": ["שלום", "עולם"],
    "zh": ["你好", "世界", "中文分词测试", "机器学习", "模型"],
    "ja": ["こんにちは", "カタカナ", "漢字", "東京"],
    "ko": ["안녕하세요", "한국어", "학습"],
    "hi": ["नमस्ते", "हिन्दी", "मशीन"],
    "th": ["สวัสดี", "ภาษาไทย"],
    "emoji": ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤️", "🤖🤖", "✨"],
    "num": ["3.14159", "1,000,000", "²", "½", "Ⅻ", "１２３", "2024-05-17", "0x1F", "٣٫١٤"],
    "code": ["(x) => x * 2;", "{'a': [1, 2]}", "--", "...", "«»", "“quoted”",
             "#include <vector>", "a_b", "$HOME", "i++", "!=", "e.g.", "---"],
    # Every style's added tokens, as text the others must encode normally.
    "added": ["<|endoftext|>", " <mask>", "[NAME]", "[NAME] ", "<|im_start|>", "<|eot_id|>",
              "<s>", "café"],
    "marks": ["\u0301", "a\u0308\u0301", "e\u0301", "\u1100\u1161\u11a8", "\u212b", "\u0958"],
}
SEPARATORS = [" "] * 12 + ["", "  ", "\t", "\n", "\n\n", "\r\n", "   \n", " \n ", "\u00a0",
                           "\u3000", "\u2028", "\u0085", "\u200b", "\x1c", "\t\t ", "   "]


def fragment(rng):
    if rng.random() < 0.15:
        return str(rng.randrange(0, 10 ** rng.randrange(1, 13)))
    pool = rng.choice(list(WORDS))
    word = rng.choice(WORDS[pool])
    r = rng.random()
    if r < 0.1:
        word = unicodedata.normalize("NFD", word)
    elif r < 0.15:
        word = word.upper()
    return word


def make_lines(seed, count):
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 16)):
            parts.append(fragment(rng))
            parts.append(rng.choice(SEPARATORS))
        lines.append("".join(parts).rstrip("\n"))
    return lines


def random_strings(seed, count):
    """Strings of code points drawn from every general category (those the
    Python's Unicode tables assign; a code point assigned only in a later
    Unicode version may be classed differently by the library and by ICU)."""
    groups = {}
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat not in ("Cn", "Cs"):
            groups.setdefault(cat[0], []).append(chr(cp))
    groups["ws"] = [chr(c) for c in (0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2000,
                                     0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x1C, 0x180E,
                                     0x200B, 0xFEFF)]
    groups["ascii"] = [chr(c) for c in range(0x20, 0x7F)] + ["'"] * 20 + list("stmdrevlSTMDREVLſ")
    names = sorted(groups)
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        out.append("".join(rng.choice(groups[rng.choice(names)])
                           for _ in range(rng.randrange(1, 40))))
    return out


# Strings each style must get right, including its own and the others' added tokens.
CASES = [
    "", " ", "a", "Hello world", "Hello  world", "hello\n\nworld", "   leading spaces",
    "trailing spaces   ", "tabs\tand\t\ttabs", "line\r\nbreaks\r\n\r\n", "\n", "\n\n\n   ",
    "it's don't they're we've I'm you'll he'd", "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D",
    "x'Ll 'LL 're're 'sacre", "it'ſ", "it'ſo IT'ſO'ſ'ſs", "12345678901", "1 12 123 1234",
    "１２３ ² ½ Ⅻ ٣٫١٤",
    "café cafe\u0301 CAFE\u0301", "Größe Straße", "Привет, мир!", "你好，世界。机器学习",
    "こんにちは世界", "안녕하세요 \u1100\u1161\u11a8", "नमस्ते दुनिया", "مرحبا بالعالم ١٢٣",
    "😀👍🏽👨\u200d👩\u200d👧🇫🇷 ❤️", " \u0301\u0301 a\u0308\u0301", "\u212b \u0958",
    "a\u00a0b a\u3000b a\u2028b a\u0085b a\u200bb a\x1cb a\u180eb",
    "#include <vector>\nint main() { return 0; }\n", "$HOME/.cache -- --- ... «» “q”",
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
    "<|endoftext", "<|begin_of_text|>Hi<|end_of_text|>", "<|eot_id|>\n\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<s>x</s>", "a <mask> b",
    "a   <mask>b", "<mask><mask>", "[NAME] met [NAME]s and x[NAME] [NAME]", "[NAME]   tail",
    "café<|im_end|>cafe\u0301", "the   \n  end",
    # Unicode 15.1 and 16.0 letters and digits (Garay, CJK Extension I), which
    # ICU 72 does not know; characters after Unicode 9.0 that the library's
    # NFC leaves alone (U+1DF9 before U+0E38 stays; Dives Akuru does not compose).
    "ab\U00010d4acd 1\U00010d40\U00010d41 x\U0002ebf0y \U0001e5f1\U0001e5f2",
    "\u1df9\u0e38 a\u0e38\u1df9\u0301 \U00011935\U00011930 e\u0301\u1df9",
]


def build(style):
    byte_level = pre_tokenizers.ByteLevel
    if style == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = byte_level(add_prefix_space=False, use_regex=True)
        specials = ["<|endoftext|>"]
    elif style == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            byte_level(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|eot_id|>"]
    elif style == "qwen2":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            byte_level(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    elif style == "roberta":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = byte_level(add_prefix_space=True)
        specials = ["<s>", "<pad>", "</s>"]
    else:
        raise ValueError(style)
    tok.decoder = decoders.ByteLevel()
    return tok, specials


def train(style, corpus):
    tok, specials = build(style)
    # Trained on whole lines (no split), then given the style's pre-tokenizer:
    # the merges then span every kind of boundary (digits, spaces, newlines,
    # apostrophes), so a piece cut one character off anywhere changes the ids,
    # where a vocabulary trained on the style's own pieces would hide it.
    style_pre_tokenizer = tok.pre_tokenizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=specials)
    tok.train_from_iterator(corpus, trainer)
    tok.pre_tokenizer = style_pre_tokenizer
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    elif style == "qwen2":
        tok.add_tokens([AddedToken("café", normalized=True, special=False)])
    elif style == "roberta":
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True,
                                           normalized=False)])
        tok.add_tokens([AddedToken("[NAME]", single_word=True, rstrip=True, special=False)])
    return tok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--lines", type=int, default=600, help="held-out lines")
    parser.add_argument("--styles", default="gpt2,llama3,qwen2,roberta")
    parser.add_argument("--bench", action="store_true", help="time the library instead")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    corpus = make_lines(seed=20240517, count=4000)
    heldout_lines = make_lines(seed=7, count=args.lines)
    # Documents separated by each style's end-of-text marker, as corpora often are.
    heldout = ""
    for i, line in enumerate(heldout_lines):
        heldout += line + "\n"
        if i % 50 == 49:
            heldout += ["<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "</s>"][i // 50 % 4]
    # And strings from every Unicode category, to cut the streamed file in odd places.
    heldout += "\n".join(random_strings(seed=5, count=args.lines // 2))
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(heldout)
    cases = CASES + heldout_lines[:60] + random_strings(seed=99, count=400)

    result = {"cases": cases, "styles": {}}
    timings = {}
    for style in args.styles.split(","):
        tok = train(style, corpus)
        style_dir = os.path.join(args.out, style)
        os.makedirs(style_dir, exist_ok=True)
        tok.save(os.path.join(style_dir, "tokenizer.json"))
        if args.bench:
            timings[style] = bench(tok, heldout, os.path.join(args.out, style + ".ids"))
            continue
        ids = [tok.encode(c, add_special_tokens=False).ids for c in cases]
        result["styles"][style] = {
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "ids": ids,
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
            # The library's ByteLevel decoder turns an added token's characters
            # that are also byte-alphabet characters (the é of "café") into
            # single bytes, which come out as U+FFFD; BpeTokenizer::Decode gives
            # the token's content, which is what the text said (after NFC).
            "normalized": [unicodedata.normalize("NFC", c) if tok.normalizer else c
                           for c in cases],
            "file_ids": tok.encode(heldout, add_special_tokens=False).ids,
        }
    if args.bench:
        with open(os.path.join(args.out, "bench.json"), "w", encoding="utf-8") as f:
            json.dump(timings, f)
        return
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=True)


def bench(tok, text, ids_path):
    """The library's speed on `text`; writes its ids to ids_path."""
    # A fresh tokenizer from the saved file, as a user's: training leaves caches.
    tok = Tokenizer.from_str(tok.to_str())
    best_one = best_batch = float("inf")
    lines = text.splitlines(keepends=True)
    for _ in range(3):
        start = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        best_one = min(best_one, time.perf_counter() - start)
        start = time.perf_counter()
        tok.encode_batch(lines, add_special_tokens=False)
        best_batch = min(best_batch, time.perf_counter() - start)
    out = array.array("I", ids)
    if sys.byteorder != "little":
        out.byteswap()
    with open(ids_path, "wb") as f:
        out.tofile(f)
    return {"tokens": len(ids), "encode_s": best_one, "encode_batch_s": best_batch,
            "threads": os.cpu_count()}


if __name__ == "__main__":
    main()

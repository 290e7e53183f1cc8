"""The Hugging Face side of hf_reference_test.cc (a test reference, never the product's path).

  make   DIR --family gpt2|llama|qwen2 [--dtype float32|bfloat16] [--shard-bytes N]
         [--vocab V] [--tokenizer]
         A tiny randomly initialised model made with transformers from a config (nothing is
         downloaded), saved with save_pretrained into DIR, and DIR/reference.json: input ids,
         the model's logits on them, and `steps` batches with the losses of the same training
         loop in PyTorch (fp32, no dropout) under full fine-tuning.
  train  DIR OUT_JSON [--freeze-blocks K] [--freeze-embeddings] [--adapter PEFT_DIR] [--bf16]
         The same loop over reference.json's batches with the first K blocks (and the
         embeddings) frozen, or training a PEFT LoRA adapter (loaded from PEFT_DIR, as Orrery
         exported its initial values) over the frozen model; writes the losses.
  logits DIR IDS_JSON OUT_JSON [--adapter PEFT_DIR]
         Loads DIR with AutoModelForCausalLM.from_pretrained (and a PEFT adapter over it) and
         writes its logits on the ids.

Run with the interpreter `scripts/reference-venv` prints (pinned torch and transformers).
"""
import argparse
import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM


CORPUS = ("Orrery trains many models at once. Zürich, São Paulo, Kraków and 東京 share a line.\n"
          "The quick brown fox jumps over the lazy dog; 12345 + 67890 = 80235.\n"
          "Ünïcödé text, emoji 🚀 and tabs\tand  double  spaces too.\n") * 40


def save_tokenizer(directory, vocab_size):
    """A byte-level BPE tokenizer in GPT-2's style, trained on CORPUS, as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.save(f"{directory}/tokenizer.json")
    with open(f"{directory}/corpus.txt", "w", encoding="utf-8") as f:
        f.write(CORPUS)
    with open(f"{directory}/corpus_ids.json", "w") as f:
        json.dump(tok.encode(CORPUS).ids, f)


def config_for(family, vocab=128):
    if family == "gpt2":
        return transformers.GPT2Config(
            n_layer=3, n_embd=64, n_head=4, n_positions=32, vocab_size=vocab,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    if family == "llama":
        # Grouped-query attention, an untied head and Llama 3.1's rope scaling.
        return transformers.LlamaConfig(
            num_hidden_layers=3, hidden_size=64, num_attention_heads=8, num_key_value_heads=4,
            intermediate_size=96, vocab_size=vocab, max_position_embeddings=64,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
    if family == "qwen2":
        # q/k/v biases and a tied head, as the small Qwen2 models have.
        return transformers.Qwen2Config(
            num_hidden_layers=3, hidden_size=64, num_attention_heads=8, num_key_value_heads=4,
            intermediate_size=96, vocab_size=vocab, max_position_embeddings=64,
            tie_word_embeddings=True, bos_token_id=0, eos_token_id=1)
    raise SystemExit(f"unknown family {family}")


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def make(args):
    torch.manual_seed(args.seed)
    config = config_for(args.family, args.vocab)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    # Larger-than-default weights and non-trivial norms and biases, so that every
    # parameter matters to the logits (a zero bias would hide a missing one).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0.0, 0.08)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model.to(dtype).save_pretrained(args.dir, max_shard_size=args.shard_bytes or "5GB")
    if args.tokenizer:
        save_tokenizer(args.dir, args.vocab - 16)
    # The reference is the model as saved: reloaded, in float32.
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    g = torch.Generator().manual_seed(args.seed + 1)
    batch, seq, steps = 8, 16, args.steps
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g)
    model.eval()
    ref = {"family": args.family, "input_ids": ids.tolist(),
           "logits": logits_of(model, ids).flatten().tolist(),
           "vocab": config.vocab_size, "lr": args.lr, "batches": [], "losses": []}
    # The training loop Orrery's must equal: AdamW over every parameter (a tied
    # head is one parameter here), mean cross-entropy of next-token logits.
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    for _ in range(steps):
        tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=g)
        logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                 tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref["batches"].append(tokens.tolist())
        ref["losses"].append(loss.item())
    ref["weight_decay"] = args.weight_decay
    with open(f"{args.dir}/reference.json", "w") as f:
        json.dump(ref, f)


def train(args):
    """The reference loop over reference.json's batches with frozen parts or a LoRA adapter."""
    with open(f"{args.dir}/reference.json") as f:
        ref = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    if args.adapter:
        import peft
        model = peft.PeftModel.from_pretrained(model, args.adapter, is_trainable=True)
    else:
        base = model.transformer if ref["family"] == "gpt2" else model.model
        if args.freeze_embeddings:
            for module in ([base.wte, base.wpe] if ref["family"] == "gpt2" else [base.embed_tokens]):
                module.requires_grad_(False)
        blocks = base.h if ref["family"] == "gpt2" else base.layers
        for block in blocks[:args.freeze_blocks]:
            block.requires_grad_(False)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=ref["lr"],
                            betas=(0.9, 0.999), eps=1e-8, weight_decay=ref["weight_decay"])
    losses = []
    for batch in ref["batches"]:
        tokens = torch.tensor(batch)
        # bf16: autocast around the forward, float32 master weights and loss.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                 tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(args.out, "w") as f:
        json.dump({"losses": losses}, f)


def logits(args):
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    if args.adapter:
        import peft
        model = peft.PeftModel.from_pretrained(model, args.adapter)
    model.eval()
    with open(args.ids) as f:
        ids = torch.tensor(json.load(f)["input_ids"])
    with open(args.out, "w") as f:
        json.dump({"logits": logits_of(model, ids).flatten().tolist()}, f)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--family", required=True)
    m.add_argument("--dtype", default="float32")
    m.add_argument("--shard-bytes", type=int, default=0)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--vocab", type=int, default=128)
    m.add_argument("--tokenizer", action="store_true",
                   help="also train and save a byte-level BPE tokenizer.json and corpus.txt")
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--lr", type=float, default=1e-3)
    m.add_argument("--weight-decay", type=float, default=0.01)
    m.set_defaults(run=make)
    t = sub.add_parser("train")
    t.add_argument("dir")
    t.add_argument("out")
    t.add_argument("--freeze-blocks", type=int, default=0)
    t.add_argument("--freeze-embeddings", action="store_true")
    t.add_argument("--adapter", default="")
    t.add_argument("--bf16", action="store_true")
    t.set_defaults(run=train)
    lg = sub.add_parser("logits")
    lg.add_argument("dir")
    lg.add_argument("ids")
    lg.add_argument("out")
    lg.add_argument("--adapter", default="", help="a PEFT adapter directory over DIR")
    lg.set_defaults(run=logits)
    args = p.parse_args()
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())

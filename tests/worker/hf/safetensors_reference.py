"""The Python side of safetensors_reference_test.cc: the real safetensors and
transformers libraries (pinned by scripts/reference-venv) write files the C++
reader must read bit for bit, and load files the C++ writer wrote.

    safetensors_reference.py write OUT   files by safetensors.torch.save_file and
                                         save_pretrained, with each float tensor's
                                         float32 values in OUT/expected/ and a
                                         manifest (OUT/manifest.json)
    safetensors_reference.py check DIR   loads what the C++ writer put in DIR (as
                                         DIR/manifest.json describes) and compares it
                                         with torch's own conversion of the sources

Nothing is downloaded: the GPT-2 models are made from a config with seeded
random weights. Exits non-zero with a message on any mismatch.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F64": torch.float64, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}
# Same-width integer views, for bitwise comparison.
INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def fail(message):
    print("safetensors_reference.py: " + message, file=sys.stderr)
    sys.exit(1)


def with_specials(t):
    """Puts infinities, NaN, signed zero, subnormals and rounding ties into t."""
    flat = t.reshape(-1)
    specials = [float("inf"), float("-inf"), float("nan"), -0.0, 1e-40, -3e-45, 65520.0,
                1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -11, 6e-8]
    for i, v in enumerate(specials[: flat.numel()]):
        flat[i] = v
    return t


def dump_expected(out_dir, tag, tensors):
    """float32 values of each float tensor, raw little-endian, for the C++ side."""
    os.makedirs(os.path.join(out_dir, "expected", tag), exist_ok=True)
    entries = {}
    for name, t in tensors.items():
        entry = {"dtype": NAMES[t.dtype], "shape": list(t.shape)}
        if t.is_floating_point():
            path = os.path.join(out_dir, "expected", tag, name + ".f32")
            t.detach().to(torch.float32).contiguous().numpy().tofile(path)
            entry["expected"] = path
        entries[name] = entry
    return entries


def tiny_gpt2(dtype, seed):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).to(dtype).eval()


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    single = {
        "bf16.matrix": with_specials(torch.randn(7, 13, generator=g)).to(torch.bfloat16),
        "fp16.matrix": with_specials(torch.randn(9, 6, generator=g) * 100).to(torch.float16),
        "fp32.matrix": with_specials(torch.randn(5, 11, generator=g)),
        "fp32.cube": torch.randn(3, 4, 5, generator=g),
        "bf16.vector": torch.randn(17, generator=g).to(torch.bfloat16),
        "fp16.scalar": torch.tensor(1.5, dtype=torch.float16),
        "f64.vector": torch.randn(4, generator=g, dtype=torch.float64),
        "i64.ids": torch.arange(6, dtype=torch.int64),
    }
    metadata = {"format": "pt", "source": "orrery-reference"}
    save_file(single, os.path.join(out_dir, "single.safetensors"), metadata=metadata)
    manifest = {"single": {"path": os.path.join(out_dir, "single.safetensors"),
                           "metadata": metadata,
                           "tensors": dump_expected(out_dir, "single", single)}}

    # save_pretrained of tiny GPT-2s: sharded bf16 and fp16, single-file fp32.
    for tag, dtype, shard in [("gpt2-bf16", torch.bfloat16, "20KB"),
                              ("gpt2-fp16", torch.float16, "30KB"),
                              ("gpt2-fp32", torch.float32, None)]:
        model = tiny_gpt2(dtype, seed=7)
        path = os.path.join(out_dir, tag)
        if shard is None:
            model.save_pretrained(path)
        else:
            model.save_pretrained(path, max_shard_size=shard)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                saved = sorted(json.load(f)["weight_map"])
        else:
            with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
                saved = sorted(f.keys())
        state = model.state_dict()
        missing = [n for n in saved if n not in state]
        if missing:
            fail(f"{tag}: saved tensors {missing} are not in the model's state_dict")
        manifest[tag] = {"path": path, "sharded": os.path.exists(index),
                         "tensors": dump_expected(out_dir, tag, {n: state[n] for n in saved})}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def same_bits(name, got, want):
    """Bitwise equality of two same-dtype tensors; NaNs need only be NaN."""
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        fail(f"{name}: got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}")
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan):
        fail(f"{name}: NaNs at different places")
    view = INT_VIEW[got.dtype]
    gi, wi = got.view(view)[~nan], want.view(view)[~nan]
    if not torch.equal(gi, wi):
        i = int((gi != wi).nonzero()[0])
        fail(f"{name}: element {i} has bits {int(gi[i]) & 0xFFFFFFFF:#x}, torch gives "
             f"{int(wi[i]) & 0xFFFFFFFF:#x} (of {want.numel()}; "
             f"{int((gi != wi).sum())} differ)")


def check_export(export):
    directory, dtype = export["dir"], DTYPES[export["dtype"]]
    index_path = os.path.join(directory, "model.safetensors.index.json")
    loaded = {}
    if export["sharded"]:
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        shards = sorted(set(weight_map.values()))
        if len(shards) < 2:
            fail(f"{directory}: a sharded export with {len(shards)} shard")
        total = 0
        for shard in shards:
            tensors = load_file(os.path.join(directory, shard))
            names = sorted(n for n, s in weight_map.items() if s == shard)
            if sorted(tensors) != names:
                fail(f"{shard}: holds {sorted(tensors)}, the index says {names}")
            total += sum(t.numel() * t.element_size() for t in tensors.values())
            loaded.update(tensors)
        if index["metadata"]["total_size"] != total:
            fail(f"{index_path}: total_size {index['metadata']['total_size']}, shards hold {total}")
        first = os.path.join(directory, shards[0])
    else:
        if os.path.exists(index_path):
            fail(f"{directory}: a single-file export left an index")
        first = os.path.join(directory, "model.safetensors")
        loaded = load_file(first)
    with safe_open(first, "pt") as f:
        if f.metadata() != {"format": "pt"}:
            fail(f"{first}: metadata {f.metadata()}")
    if sorted(loaded) != sorted(export["tensors"]):
        fail(f"{directory}: holds {sorted(loaded)}, want {sorted(export['tensors'])}")
    for name, t in export["tensors"].items():
        src = torch.from_numpy(np.fromfile(t["source"], dtype=np.float32)).reshape(t["shape"])
        same_bits(f"{directory}:{name}", loaded[name], src.to(dtype))
    print(f"checked {directory}: {len(loaded)} tensors as {export['dtype']}")


def check_model(entry):
    """from_pretrained of the C++ export gives the reference model's weights."""
    from transformers import AutoModelForCausalLM
    got, info = AutoModelForCausalLM.from_pretrained(entry["dir"], output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        fail(f"{entry['dir']}: from_pretrained reports {problems}")
    want = AutoModelForCausalLM.from_pretrained(entry["reference"])
    got_state, want_state = got.state_dict(), want.state_dict()
    if sorted(got_state) != sorted(want_state):
        fail(f"{entry['dir']}: parameters {sorted(got_state)} != {sorted(want_state)}")
    for name, w in want_state.items():
        if not torch.equal(got_state[name].float(), w.float()):
            fail(f"{entry['dir']}: {name} differs from the reference")
    # The tied head really is the embedding.
    ids = torch.arange(8).unsqueeze(0)
    with torch.no_grad():
        if not torch.equal(got(ids).logits.float(), want(ids).logits.float()):
            fail(f"{entry['dir']}: logits differ from the reference model's")
    print(f"checked {entry['dir']}: from_pretrained matches {entry['reference']}")


def check(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    for export in manifest["exports"]:
        check_export(export)
    for entry in manifest.get("models", []):
        check_model(entry)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        fail("usage: safetensors_reference.py write|check DIR")
    (write if sys.argv[1] == "write" else check)(sys.argv[2])

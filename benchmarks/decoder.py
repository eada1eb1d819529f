"""attnx against transformers on a random checkpoint shaped like Qwen2.5-0.5B: wall time and peak memory per process.

Usage: python benchmarks/decoder.py [--folder DIR] [--tokens 256] [--layers 0,11,23] [--repeat 3]

Writes (once; reused when DIR already holds it) a random bfloat16 checkpoint with Qwen2.5-0.5B's shape:
24 layers, 14 heads, 2 K/V heads, hidden 896, MLP 4864, vocabulary 151,936, biases on q/k/v, tied
embeddings. Then, in fresh processes with the same thread count, it times:

- ``attnx run --model DIR --layer L -f npy --tensor weights`` for each L (the layers up to L run, each
  layer's weights read when it runs), in float64 (attnx's default) and float32;
- transformers: load the checkpoint and run one forward pass with ``output_attentions`` (eager
  attention; float32, the reference, and bfloat16 as stored), once per repetition.

Each figure is the median over the repetitions, runs interleaved; peak RSS is the child's
``ru_maxrss`` (which starts from this process's own, about 20 MiB: NumPy is not imported here).
Ratios are attnx ÷ transformers. Measured figures live in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import ATTNX, measure  # benchmarks/ is the script's folder, first on sys.path

SHAPE = {
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 21, "bos_token_id": 151643, "eos_token_id": 151643,
    "dtype": "bfloat16",
}  # fmt: skip

TRANSFORMERS = """
import sys, torch, transformers
torch.set_num_threads({threads})
ids = torch.tensor([[int(i) for i in sys.argv[2].split(",")]])
model = transformers.AutoModelForCausalLM.from_pretrained(
    sys.argv[1], dtype=getattr(torch, sys.argv[3]), attn_implementation="eager"
)
with torch.no_grad():
    out = model.model(ids, output_attentions=True)
assert len(out.attentions) == {layers}
"""


def tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen2 checkpoint with tied embeddings, by name and shape."""
    d, ff = config["hidden_size"], config["intermediate_size"]
    kv = d // config["num_attention_heads"] * config["num_key_value_heads"]  # K/V heads × head_dim
    out: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config["vocab_size"], d),
        "model.norm.weight": (d,),
    }
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out |= {
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
            p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (d, d),
            p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d), p + "mlp.down_proj.weight": (d, ff),
        }  # fmt: skip
    return out


def write_checkpoint(folder: Path) -> None:
    """Random bfloat16 weights (normal, σ 0.02; norms near 1) as one safetensors file, with config and tokenizer."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    shapes = tensors(SHAPE)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    rng = np.random.default_rng(0)
    partial = folder / "model.safetensors.partial"
    with partial.open("wb") as out:
        out.write(len(encoded).to_bytes(8, "little") + encoded)
        for name, shape in shapes.items():
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            if name.endswith("norm.weight"):
                values += np.float32(1)
            out.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())  # bfloat16: the top 16 bits
    partial.rename(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(SHAPE, indent=2))
    words = [f"w{i}" for i in range(2000)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "attnx-qwen2.5-0.5b-random")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--layers", default="0,11,23")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_only:
        write_checkpoint(args.folder)
        return
    if not (args.folder / "model.safetensors").is_file():
        # In a child: a child's peak RSS starts from its parent's, so this process stays small.
        print(f"writing the checkpoint to {args.folder} ...", file=sys.stderr)
        subprocess.run([sys.executable, __file__, "--folder", str(args.folder), "--write-only"], check=True)
    threads = str(args.threads)
    env = os.environ | {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    text = " ".join(f"w{i % 2000}" for i in range(args.tokens))
    ids = ",".join(str(i % 2000) for i in range(args.tokens))
    script = TRANSFORMERS.format(threads=args.threads, layers=SHAPE["num_hidden_layers"])
    commands = {
        f"transformers ({dtype}, all layers)": [sys.executable, "-c", script, str(args.folder), ids, dtype]
        for dtype in ("float32", "bfloat16")
    }
    for layer in args.layers.split(","):
        for dtype in ("float64", "float32"):
            commands[f"attnx --layer {layer} ({dtype})"] = [
                *ATTNX, "run", "--model", str(args.folder), "--text", text, "--layer", layer, "--dtype", dtype,
                "-f", "npy", "--tensor", "weights", "-o", str(args.folder / "weights.npy"),
            ]  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, command in commands.items():
            runs[name].append(measure(command, env))
    reference = "transformers (float32, all layers)"
    base_time = statistics.median(t for t, _ in runs[reference])
    base_rss = statistics.median(r for _, r in runs[reference])
    print(f"{args.tokens} tokens, {args.threads} threads, median of {args.repeat}")
    print(f"{'command':38} {'wall s':>8} {'× tf':>6} {'peak MiB':>9} {'× tf':>6}")
    for name, values in runs.items():
        seconds, rss = statistics.median(t for t, _ in values), statistics.median(r for _, r in values)
        print(f"{name:38} {seconds:8.2f} {seconds / base_time:6.2f} {rss:9.0f} {rss / base_rss:6.2f}")


if __name__ == "__main__":
    main()

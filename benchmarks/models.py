"""attnx against transformers on random Pythia- and Gemma-3-shaped bfloat16 checkpoints: wall time, peak RSS."""

# Usage: python benchmarks/models.py [--folder DIR] [--tokens 64] [--repeat 3] [--threads N] [--models pythia,gemma3]
#        [--engines numpy,torch]
#
# Builds in a temporary folder (or DIR, reused when it already holds them) two random checkpoints with
# transformers' own classes and `save_pretrained`, in bfloat16, each with a word-level tokenizer.json
# (`w0` ... `w1999`, no special tokens, so the text is exactly `--tokens` tokens):
#
# - `pythia`: GPTNeoXForCausalLM with Pythia-160M's shape (hidden 768, 12 layers, 12 heads, MLP 3072,
#   rotary_pct 0.25, parallel residual, untied `embed_out`, vocabulary 50,304);
# - `gemma3`: Gemma3ForCausalLM (text only) with Gemma-3-270M's shape (hidden 640, 18 layers, 4 heads,
#   1 K/V head, head_dim 256, MLP 2048, 5 sliding : 1 full layers, tied embeddings, vocabulary 262,144).
#
# Then, in fresh processes with the same thread count (OMP/OpenBLAS/MKL variables and `torch.set_num_threads`),
# interleaved, it times for each model:
#
# - transformers: `AutoModelForCausalLM.from_pretrained` (eager attention) in float32 and in bfloat16 as
#   stored, then one forward pass of the base model (every layer and the final norm, no LM head) with
#   `output_attentions=False` under `torch.no_grad`;
# - `attnx run --model DIR --text TEXT --layer L -f npy --tensor output -o /dev/null` for L the first and
#   the last layer (layers before L run whole, then layer L's attention output), in float64 (attnx's
#   default) and float32; with `-e torch` (the whole forward pass on torch) for the last layer.
#
# The floor of the transformers side, `import torch, transformers` (and its lazy auto-model module), is
# timed too, once per repetition.
#
# Each figure is the median over the repetitions; peak RSS is the child's `ru_maxrss` from `wait4`
# (this process imports neither NumPy nor torch and builds the checkpoints in a child, so it stays about
# 20 MiB, where a child's count starts). Ratios are attnx ÷ transformers float32 (the bfloat16 row has its
# own ratio to float32). Measured figures live in docs/performance.md.

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from processes import ATTNX, measure  # benchmarks/ is the script's folder, first on sys.path

WORDS = 2000  # the tokenizer's vocabulary: w0 ... w1999 (ids below every model's vocabulary)

SHAPES: dict[str, dict[str, Any]] = {
    "pythia": {  # Pythia-160M
        "model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048,
        "use_parallel_residual": True, "tie_word_embeddings": False, "vocab_size": 50304, "hidden_act": "gelu",
        "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 0,
    },
    "gemma3": {  # Gemma-3-270M, text only
        "model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
        "max_position_embeddings": 32768, "query_pre_attn_scalar": 256, "sliding_window": 512,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "tie_word_embeddings": True,
        "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1,
    },
}  # fmt: skip


TRANSFORMERS = """
import sys, torch, transformers
torch.set_num_threads({threads})
ids = torch.tensor([[int(i) for i in sys.argv[2].split(",")]])
model = transformers.AutoModelForCausalLM.from_pretrained(
    sys.argv[1], dtype=getattr(torch, sys.argv[3]), attn_implementation="eager"
)
with torch.no_grad():
    out = model.base_model(ids, output_attentions=False)
assert out.last_hidden_state.shape[1] == ids.shape[1]
"""
IMPORTS = "import torch, transformers; transformers.AutoModelForCausalLM"  # the floor of the transformers side


def write_checkpoint(folder: Path, name: str) -> None:
    """A random bfloat16 model of shape `SHAPES[name]`, saved by transformers, with a word-level tokenizer."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    transformers.utils.logging.disable_progress_bar()
    settings = dict(SHAPES[name])
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(WORDS)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(partial / "tokenizer.json"))
    partial.rename(folder)


def commands(folder: Path, name: str, tokens: int, threads: int, engines: str) -> dict[str, list[str]]:
    """What runs for model `name`: transformers in float32 (the reference, first) and bfloat16, then attnx on the
    NumPy engine (the first and the last layer) and, where `engines` names it, on torch (the last layer: every layer
    of the forward pass on torch)."""
    text = " ".join(f"w{(7 * i) % WORDS}" for i in range(tokens))
    ids = ",".join(str((7 * i) % WORDS) for i in range(tokens))
    script = TRANSFORMERS.format(threads=threads)
    out = {
        f"{name}: transformers {dtype}": [sys.executable, "-c", script, str(folder), ids, dtype]
        for dtype in ("float32", "bfloat16")
    }
    last = SHAPES[name]["num_hidden_layers"] - 1
    rows = [("numpy", layer, dtype) for layer in (0, last) for dtype in ("float64", "float32")]
    rows += [("torch", last, dtype) for dtype in ("float64", "float32") if "torch" in engines]
    for engine, layer, dtype in rows:
        out[f"{name}: attnx -e {engine} --layer {layer} {dtype}"] = [
            *ATTNX, "run", "--model", str(folder), "--text", text, "--layer", str(layer), "--dtype", dtype,
            "-e", engine, "-f", "npy", "--tensor", "output", "-o", os.devnull,
        ]  # fmt: skip
    return out


def run(root: Path, args: argparse.Namespace) -> None:
    names = args.models.split(",")
    for name in names:
        if not (root / name / "config.json").is_file():
            # In a child: a child's peak RSS starts from its parent's, so this process stays small.
            print(f"building {name} in {root / name} ...", file=sys.stderr)
            start = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--folder", str(root), "--write-only", name], check=True)
            print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr)
    threads = str(args.threads)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env |= {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    table = {
        "transformers: imports only": [sys.executable, "-c", IMPORTS],
    } | {
        label: command
        for name in names
        for label, command in commands(root / name, name, args.tokens, args.threads, args.engines).items()
    }
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in table}
    for _ in range(args.repeat):  # interleaved, so load on the machine hits every command alike
        for label, command in table.items():
            runs[label].append(measure(command, env))
    print(f"{args.tokens} tokens, {args.threads} threads, median of {args.repeat}; ratios to transformers float32")
    print(f"{'process':42} {'wall s':>7} {'× tf':>6} {'peak MiB':>9} {'× tf':>6}")
    floor = runs["transformers: imports only"]
    seconds, rss = statistics.median(t for t, _ in floor), statistics.median(r for _, r in floor)
    print(f"{'transformers: imports only':42} {seconds:7.2f} {'':6} {rss:9.0f}")
    for name in names:
        reference = runs[f"{name}: transformers float32"]
        base_time = statistics.median(t for t, _ in reference)
        base_rss = statistics.median(r for _, r in reference)
        for label, values in runs.items():
            if label.startswith(name + ":"):
                seconds = statistics.median(t for t, _ in values)
                rss = statistics.median(r for _, r in values)
                print(f"{label:42} {seconds:7.2f} {seconds / base_time:6.2f} {rss:9.0f} {rss / base_rss:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="keep the checkpoints here (default: a temporary folder)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--engines", default="numpy,torch", help="attnx's engines to time (numpy always)")
    parser.add_argument("--write-only", choices=list(SHAPES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_only:
        assert args.folder is not None  # the parent passes its folder with --write-only
        write_checkpoint(args.folder / args.write_only, args.write_only)
    elif args.folder:
        args.folder.mkdir(parents=True, exist_ok=True)
        run(args.folder, args)
    else:
        with tempfile.TemporaryDirectory(prefix="attnx-models-") as folder:
            run(Path(folder), args)


if __name__ == "__main__":
    main()

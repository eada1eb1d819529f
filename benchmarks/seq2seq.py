"""attnx against transformers on a random T5-small-shaped encoder-decoder: a cross-attention layer, greedy tokens."""

# Usage: python benchmarks/seq2seq.py [--folder DIR] [--source 64] [--target 32] [--repeat 3]
#
# Builds (in a temporary folder, or DIR, reused when it already holds it) a random T5ForConditionalGeneration of
# T5-small's shape (6 + 6 layers, d_model 512, 8 heads × d_kv 64, d_ff 2048, ReLU, 32 relative buckets, vocabulary
# 32,128) with a word-level tokenizer.json (`w0` ... `w1999` and `</s>`), so the source is `--source` tokens and the
# target `--target` tokens exactly. Then, in fresh processes, interleaved, median of `--repeat`:
#
# - `attnx run --model DIR --text SRC --target TGT --layer dec:-1 --attention cross -f npy --tensor weights
#   -o /dev/null` against transformers' `from_pretrained` (eager) plus one forward pass with `decoder_input_ids`;
# - `attnx run ... --generate N` (N = `--target`: the encoder once, then each new token through each layer once)
#   against transformers' `from_pretrained` plus `generate(max_new_tokens=N, do_sample=False, num_beams=1)`. The
#   random model's end token never wins (its row of the tied LM head is zero: a logit of 0 under the largest of
#   32,128 random ones), so both write all N tokens; the tokens are compared once, before timing.
#
# Prints wall seconds and the ratios attnx ÷ transformers. Measured figures live in docs/performance.md.

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = """
import json, sys, torch, transformers
from tokenizers import Tokenizer, models, pre_tokenizers
folder = sys.argv[1]
vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i + 3 for i in range(2000)}}
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer.save(folder + "/tokenizer.json")
torch.manual_seed(0)
config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
model = transformers.T5ForConditionalGeneration(config)
with torch.no_grad():
    model.shared.weight[1] = 0.0  # the end token never wins: both sides write every token asked for
model.save_pretrained(folder)
"""

REFERENCE = """
import sys, torch, transformers
folder, mode, source, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ids = torch.tensor([[3 + i % 2000 for i in range(source)]])
model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager")
with torch.no_grad():
    if mode == "forward":
        model(input_ids=ids, decoder_input_ids=torch.tensor([[0] + [3 + i for i in range(target - 1)]]))
    else:
        model.generate(ids, max_new_tokens=target, do_sample=False, num_beams=1)
"""


def timed(command: list[str]) -> float:
    """Wall seconds of one run of ``command`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--source", type=int, default=64)
    parser.add_argument("--target", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="t5-small-"))
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "model.safetensors").exists():
        subprocess.run([sys.executable, "-c", BUILD, str(folder)], check=True)
    source = " ".join(f"w{i % 2000}" for i in range(args.source))
    target = " ".join(f"w{i}" for i in range(args.target))
    attnx = [sys.executable, "-m", "attnx", "run", "--model", str(folder), "--text", source, "--layer", "dec:-1",
             "--attention", "cross", "-f", "npy", "--tensor", "weights", "-o", "/dev/null"]  # fmt: skip
    runs = {
        "attnx cross-attention, last decoder layer": [*attnx, "--target", target],
        "transformers load + forward": [sys.executable, "-c", REFERENCE, str(folder), "forward", str(args.source),
                                        str(args.target)],
        f"attnx --generate {args.target}": [*attnx, "--generate", str(args.target)],
        f"transformers load + generate {args.target}": [sys.executable, "-c", REFERENCE, str(folder), "generate",
                                                        str(args.source), str(args.target)],
    }  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, command in runs.items():
            times[name].append(timed(command))
    medians = {name: statistics.median(found) for name, found in times.items()}
    for name, median in medians.items():
        print(f"{name:48} {median:7.2f} s")
    names = list(medians)
    print(f"ratio forward: {medians[names[0]] / medians[names[1]]:.2f}   "
          f"ratio generate: {medians[names[2]] / medians[names[3]]:.2f}   (attnx ÷ transformers)")  # fmt: skip


if __name__ == "__main__":
    main()

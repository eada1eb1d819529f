"""Checkpoint files are untrusted input: every config value, tensor and tokenizer checked, one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.models import describe
from attnx.workflows import load_model_spec
from tests.models.checkpoints import TEXT, Reference
from tests.models.test_checkpoint import copy_of, edit_config
from tests.runner import run_attnx


def rewrite_tensor(path: Path, name: str, array: np.ndarray) -> None:
    """Replace tensor ``name`` of model.safetensors with ``array`` (any dtype or shape)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(path / "model.safetensors")
    tensors[name] = array
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})


class TestConfigSchema:
    """Each value a family reads has a type and a range; a wrong one is one located line, exit 2."""

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"model_type": ["gpt2"]}, "model_type ['gpt2'] is not supported"),
            ({"model_type": None, "architectures": 5}, "architectures must be a list of strings, got 5"),
            ({"n_embd": 10**4000}, "n_embd must be a whole number from 1 to 1,099,511,627,776"),
            ({"n_head": 0}, "n_head must be a whole number from 1"),
            ({"layer_norm_epsilon": -1e-5}, "layer_norm_epsilon must be a number between 0 and 1, got -1e-05"),
            ({"layer_norm_epsilon": "small"}, "layer_norm_epsilon must be a finite number, got 'small'"),
            ({"activation_function": ["gelu"]}, "activation_function must be a string, got ['gelu']"),
            ({"scale_attn_weights": "yes"}, "scale_attn_weights must be true or false, got 'yes'"),
        ],
    )
    def test_gpt2_values(self, gpt2: Reference, tmp_path: Path, changes: dict, message: str) -> None:
        path = copy_of(gpt2, tmp_path)
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=f"config.json: {message}".replace("[", r"\[").replace("(", r"\(")):
            describe(path)

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a finite number"),
            ({"rope_parameters": [1]}, "rope_parameters must be an object"),
            ({"rope_parameters": {"rope_type": "default", "rope_theta": "big"}}, r"rope.theta must be a .*number"),
            ({"tie_word_embeddings": 1}, "tie_word_embeddings must be true or false"),
            ({"num_key_value_heads": 3}, "4 attention heads cannot be shared among 3 K/V heads"),
        ],
    )
    def test_decoder_values(self, llama: object, tmp_path: Path, changes: dict, message: str) -> None:
        path = Path(__import__("shutil").copytree(llama.path, tmp_path / "llama"))  # type: ignore[attr-defined]
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=message):
            describe(path)

    def test_the_cli_says_it_in_one_line(self, gpt2: Reference, tmp_path: Path) -> None:
        path = copy_of(gpt2, tmp_path)
        edit_config(path, model_type=None, architectures=5)
        out = run_attnx("model", str(path))
        assert out.code == 2 and out.stderr.count("\n") == 1 and "architectures must be a list of strings" in out.stderr


class TestTensorShapes:
    """Every tensor's dtype and shape are checked against what config.json implies, before anything runs."""

    def test_embeddings_too_wide(self, gpt2: Reference, tmp_path: Path) -> None:
        path = copy_of(gpt2, tmp_path)
        rewrite_tensor(path, "transformer.wte.weight", np.zeros((gpt2_vocab(path), 48), dtype=np.float32))
        with pytest.raises(
            ModelError, match=r"'transformer.wte.weight' has shape \(\d+, 48\), where config.json implies \(\d+, 32\)"
        ):
            load_model_spec(path, TEXT, 0)

    def test_position_table_too_short(self, gpt2: Reference, tmp_path: Path) -> None:
        """A position table of 0 rows (bfloat16 or not): one line, not a broadcast error."""
        path = copy_of(gpt2, tmp_path)
        rewrite_tensor(path, "transformer.wpe.weight", np.zeros((0, 32), dtype=np.float32))
        with pytest.raises(ModelError, match=r"'transformer.wpe.weight' has 0 rows; \d+ are needed"):
            load_model_spec(path, TEXT, 0)

    def test_one_dimensional_embeddings(self, gpt2: Reference, tmp_path: Path) -> None:
        path = copy_of(gpt2, tmp_path)
        rewrite_tensor(path, "transformer.wte.weight", np.zeros(32, dtype=np.float32))
        with pytest.raises(ModelError, match=r"'transformer.wte.weight' has shape \(32,\), where config.json implies"):
            load_model_spec(path, TEXT, 0)

    def test_integer_weights(self, gpt2: Reference, tmp_path: Path) -> None:
        path = copy_of(gpt2, tmp_path)
        rewrite_tensor(path, "transformer.h.0.ln_1.weight", np.ones(32, dtype=np.int64))
        with pytest.raises(ModelError, match=r"'transformer\.h\.0\.ln_1\.weight' holds I64 values; it should hold F16"):
            load_model_spec(path, TEXT, 0)

    def test_decoder_projection_of_the_wrong_width(self, llama: object, tmp_path: Path) -> None:
        """A Llama whose config says 1 K/V head but whose k_proj holds 2 (32 rows of d 16): refused by name."""
        import shutil

        path = Path(shutil.copytree(llama.path, tmp_path / "llama"))  # type: ignore[attr-defined]
        edit_config(path, num_key_value_heads=1)
        with pytest.raises(ModelError, match=r"k_proj.bias' has shape \(32,\), where config.json implies \(16,\)"):
            load_model_spec(path, TEXT, 0)


def gpt2_vocab(path: Path) -> int:
    return int(json.loads((path / "config.json").read_text())["vocab_size"])


class TestTokenizerFiles:
    """tokenizer.json is parsed by native code: its failures, panics included, are one line."""

    @pytest.mark.parametrize(
        ("key", "part", "text"),
        [
            # a Replace on a zero-width match: tokenizers indexes past the end and panics
            ("normalizer", {"type": "Replace", "pattern": {"Regex": "\\b"}, "content": "xx"}, "the cat"),
            # catastrophic backtracking: Oniguruma's retry limit stops it (in 0.1 s), as a panic
            ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated",
                               "invert": False}, "a" * 40 + "b"),
        ],
    )  # fmt: skip
    def test_a_panicking_regex(self, gpt2: Reference, tmp_path: Path, key: str, part: dict, text: str) -> None:
        """tokenizers panics in Rust on these: exit 2, one line, no backtrace, no hang."""
        path = copy_of(gpt2, tmp_path)
        data = json.loads((path / "tokenizer.json").read_text())
        data[key] = part
        (path / "tokenizer.json").write_text(json.dumps(data))
        proc = subprocess.run([sys.executable, "-m", "attnx", "run", "--model", str(path), "--text", text],
                              capture_output=True, text=True, env={"RUST_BACKTRACE": "1", "PATH": "/usr/bin:/bin"},
                              timeout=60)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"attnx: error: {path / 'tokenizer.json'}: the text cannot be tokenized")
        assert proc.stderr.count("\n") == 1 and "panicked" not in proc.stderr

    def test_size_caps(self, gpt2: Reference, tmp_path: Path) -> None:
        """config.json and tokenizer.json are held to --max-bytes like every input."""
        out = run_attnx("model", str(gpt2.path), "--max-bytes", "100")
        assert out.code == 2 and "config.json: 816 bytes exceeds the input size cap of 100 bytes" in out.stderr


class TestWarnings:
    """A warning from any library is one attnx line, never Python's two-line format."""

    def test_numpy_warning(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import attnx.engines

        real = attnx.engines.compute

        def noisy(*args: object, **kwargs: object) -> object:
            np.float64(1e308) * 10  # overflow: NumPy's RuntimeWarning
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(attnx.engines, "compute", noisy)
        with np.errstate(over="warn"):
            out = run_attnx("run", "-f", "json")
        assert (
            out.code == 0 and out.stderr == "attnx: warning: RuntimeWarning: overflow encountered in scalar multiply\n"
        )

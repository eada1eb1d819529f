"""Enormous tokens: every place that shows a token shows its two ends around `…` in a bounded number of cells, cut
before anything measures it; machine output keeps the whole text."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from rich.cells import cell_len
from rich.control import strip_control_codes

from attnx.text import CUT, LABEL_LIMIT, MARKS, NAME_LIMIT, console, inert, label
from tests.runner import run_attnx

# Tokens of 100,000 characters (the issue saw 2 and 10 million; the cut is the same), each kind of text a token can
# be: one cell a character, two, none, and characters shown as escapes several cells long.
KINDS = {
    "ascii": "A" + "x" * 100_000 + "Z",
    "wide": "猫" + "字" * 100_000 + "尾",
    "combining": "e" + "\u0301" * 100_000 + "!",
    "controls": "\x1b[2J" + "\x07" * 100_000 + "\u202e",
    "astral": "𝐀" + "\U0010ffff" * 100_000 + "𝐙",
}
WIDTH = 100  # the terminal's columns in the command tests


def shown_width(text: str) -> int:
    """Cells ``text`` takes on a terminal once made inert, as Rich counts them."""
    return cell_len(inert(text))


def written(folder: Path, query: str, key: str | None = None) -> Path:
    """A two-token input whose query 0 (and, as cross-attention, key 0) is the long one."""
    document: dict[str, Any] = {"q": [[1.0, 0.0], [0.0, 1.0]], "k": [[1.0, 0.0], [0.0, 1.0]],
                                "v": [[1.0, 2.0], [3.0, 4.0]], "tokens": [query, "b"]}  # fmt: skip
    if key is not None:
        document["key_tokens"] = [key, "c"]
    path = folder / "long.json"
    path.write_text(json.dumps(document))
    return path


def printed(*renderables: Any) -> str:
    """What attnx's own console (inert) prints of ``renderables`` at ``WIDTH`` columns, without colour."""
    out = console(width=WIDTH, file=io.StringIO(), color_system=None)
    for renderable in renderables:
        out.print(renderable)
    return out.file.getvalue()  # type: ignore[attr-defined]


def assert_cut_in(text: str, token: str) -> None:
    """Every line of ``text`` fits ``WIDTH``, no raw control reaches it, and it shows ``token`` cut by ``label``
    (less the controls Rich drops from a text itself: BEL, backspace, vertical tab, form feed, carriage return)."""
    assert max(cell_len(line) for line in text.splitlines()) <= WIDTH
    assert all(char == "\n" or unicodedata.category(char) not in ("Cc", "Cf") for char in text)
    assert inert(strip_control_codes(label(token))) in text


class TestLabel:
    """``label`` cuts a long token in its middle to a bounded number of cells, keeping both ends."""

    @pytest.mark.parametrize("token", ["cat", " cat", "", "x" * LABEL_LIMIT, "猫" * (LABEL_LIMIT // 2), "cafe\u0301",
                                       "▁Paris", "\x07" * (LABEL_LIMIT // 4)])  # fmt: skip
    def test_short_tokens_are_whole(self, token: str) -> None:
        """A token shown in at most the limit's cells comes back as it is."""
        assert label(token) == token

    @pytest.mark.parametrize("token", ["x" * (LABEL_LIMIT + 1), "猫" * (LABEL_LIMIT // 2 + 1), "\x07" * 7])
    def test_just_too_long(self, token: str) -> None:
        """One cell past the limit is cut, and the cut fits the limit."""
        shown = label(token)
        assert CUT in shown and shown != token and shown_width(shown) <= LABEL_LIMIT

    @pytest.mark.parametrize("kind", KINDS)
    def test_long_tokens_keep_their_ends(self, kind: str) -> None:
        """At most the limit's cells once inert, the token's start and end around one `…`."""
        token = KINDS[kind]
        shown = label(token)
        head, tail = shown.split(CUT)
        assert head and tail and token.startswith(head) and token.endswith(tail)
        assert shown_width(shown) <= LABEL_LIMIT and len(shown) <= LABEL_LIMIT * MARKS + 1

    def test_cells_not_characters(self) -> None:
        """Wide characters count two cells: twelve of them fill the limit, where 24 ASCII characters do."""
        assert label("x" * 30) == "x" * 15 + CUT + "x" * 8
        assert label("猫" * 30) == "猫" * 7 + CUT + "猫" * 4  # 14 + 1 + 8 cells: a wide one would pass 24

    @pytest.mark.parametrize("offset", range(10, 20))
    def test_an_escape_at_the_cut_is_whole(self, offset: int) -> None:
        """The raw text is cut before it is escaped: an escape is all there or not at all, never half."""
        token = "a" * offset + "\x1b[31m" + "b" * 1000 + "\u202e" + "c" * offset
        shown = label(token)
        head, tail = shown.split(CUT)
        made_inert = inert(shown)
        assert made_inert == inert(head) + CUT + inert(tail) and made_inert.isprintable()
        assert made_inert.count("\\") == head.count("\x1b") + tail.count("\u202e")
        assert cell_len(made_inert) <= LABEL_LIMIT

    def test_names_have_their_own_limit(self) -> None:
        """A name (a class in config.json, GGUF metadata) is cut to ``NAME_LIMIT`` cells."""
        shown = label("LlamaForCausalLM" + "x" * 1_000_000, NAME_LIMIT)
        assert shown.startswith("LlamaForCausalLM") and shown_width(shown) == NAME_LIMIT

    def test_only_the_ends_are_read(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A token of ten million characters has only its ends measured: as many characters as a label can keep,
        however long the token (its timing is benchmarks/long_tokens.py's)."""
        import attnx.text

        measured: list[str] = []
        cell = attnx.text._cell
        monkeypatch.setattr(attnx.text, "_cell", lambda char: measured.append(char) or cell(char))
        for token in ("猫" * 10_000_000, "\u0301" * 10_000_000, "x" * 10_000_000):
            measured.clear()
            shown = label(token)
            assert shown_width(shown) <= LABEL_LIMIT and CUT in shown
            assert len(measured) <= 2 * LABEL_LIMIT * MARKS, (token[0], len(measured))


class TestRenderers:
    """The renderers show a long token cut, escapes and all, within the terminal's width."""

    @pytest.mark.parametrize("kind", KINDS)
    def test_table_and_heatmap(self, kind: str) -> None:
        """A matrix table and a heatmap, the token as a row and as a column label."""
        from attnx.render.heatmap import HeatScale, heatmap
        from attnx.render.tables import matrix_table

        token = KINDS[kind]
        matrix = np.array([[0.25, 0.75], [0.5, 0.5]])
        table = matrix_table("weights", matrix, [token, "b"], [token, "b"], 4)
        grid = heatmap("weights", matrix, [token, "b"], [token, "b"], 4, scale=HeatScale(1.0, "weight"), colour=False)
        assert_cut_in(printed(table, grid), token)

    def test_lines_of_model_views(self) -> None:
        """The model views' token lines, locations, head shifts and class names cut each long token."""
        from attnx.render.location import locate
        from attnx.render.model import gguf_names, tokens_line
        from attnx.render.model_diff import where

        token = KINDS["controls"]
        shift: Any = SimpleNamespace(query=0, key=0)
        summary: Any = SimpleNamespace(name="n" * 500_000, architecture="a" * 500_000)
        info: Any = SimpleNamespace(model_type="llama")
        rows = gguf_names(summary, info)
        assert tokens_line((token, "b")) == f"tokens: '{label(token)}' 'b'"
        assert where(shift, (token,), (token,)) == f"query 0 {label(token)!r} → key 0 {label(token)!r}"
        assert locate("weights", (0, 0, 1), (token, "b"), ("c", "d")).count(CUT) == 1
        assert [len(value) for _, value in rows] == [len("llama (general.architecture )") + NAME_LIMIT, NAME_LIMIT]

    def test_ablation_table(self) -> None:
        """`ablate`'s table cuts a long token and a long predicted next token (a vocabulary piece)."""
        from attnx.analysis.effects import Effect
        from attnx.render.effects import set_view

        token, piece = KINDS["ascii"], KINDS["wide"]
        effect = Effect(((0, 0),), np.array([0.1, 0.2]), np.array([0.3, 0.4]), np.array([0, 1]), np.array([1, 1]))
        view: Any = SimpleNamespace(model="m", architecture="llama", tokens=(token, "b"), layers=1, heads=1,
                                    lm_head=True, top_labels={0: piece, 1: "c"}, effects=(effect,))  # fmt: skip
        shown = printed(set_view(view, 4, colour=False))
        assert_cut_in(shown, token)
        assert f"'{label(piece)}' → 'c'" in shown

    def test_grid_names_take_the_name_limit(self) -> None:
        """A grid cuts tokens to ``LABEL_LIMIT`` cells; names passed as ``Labels(names, NAME_LIMIT)`` keep theirs."""
        from attnx.render.fitted import Labels
        from attnx.render.tables import matrix_table

        name = "scale=sqrt_dk → scale=sqrt_d_model"
        grid = matrix_table("t", np.zeros((1, 2)), [name], Labels([name, "n" * 100_000], NAME_LIMIT), 4)
        assert grid.row_labels[0] == label(name) != name and grid.col_labels[0] == name
        assert shown_width(grid.col_labels[1]) == NAME_LIMIT

    def test_explorer_panels(self, tmp_path: Path) -> None:
        """The explorer's status, token strip, head, heads and trace panels (drawn without the app) cut the
        query's long token and the long key token of cross-attention."""
        from attnx.analysis.explore import Explorer
        from attnx.io import load_spec
        from attnx.render import explore as panels

        query, key = KINDS["wide"], KINDS["ascii"]
        spec = load_spec(str(written(tmp_path, query, key)))
        state = Explorer(lambda _layer: spec, 1, spec.source, {})
        shown = printed(panels.status_line(state), panels.token_strip(state, WIDTH),
                        panels.head_panel(state, colour=False, width=WIDTH),
                        panels.heads_panel(state, colour=False, width=WIDTH), panels.trace_panel(state))  # fmt: skip
        assert_cut_in(shown, query)
        assert_cut_in(shown, key)


class TestCommands:
    """Each command that shows tokens shows them cut, at once; machine output keeps the whole token."""

    @pytest.mark.parametrize(
        ("kind", "args"),
        [("ascii", ["run", "-s", "weights"]), ("wide", ["run", "--view", "heatmap"]),
         ("combining", ["trace", "--query", "0"]), ("wide", ["heads"]), ("ascii", ["run", "-s", "output,heads"])],
    )  # fmt: skip
    def test_shown_cut(self, tmp_path: Path, kind: str, args: list[str]) -> None:
        """Every line fits the terminal's 100 columns and shows the token's ends."""
        token = KINDS[kind]
        outcome = run_attnx(args[0], str(written(tmp_path, token)), *args[1:], env={"COLUMNS": str(WIDTH)})
        assert outcome.code == 0, outcome.stderr
        assert_cut_in(outcome.stdout, token)

    def test_cross_attention_keys(self, tmp_path: Path) -> None:
        """A long key token (key_tokens) is cut in the weights table, the trace and the heads' top keys."""
        key = KINDS["wide"]
        path = written(tmp_path, "q", key)
        for args in (["run", str(path), "-s", "weights"], ["trace", str(path), "--query", "0"], ["heads", str(path)]):
            outcome = run_attnx(*args, env={"COLUMNS": str(WIDTH)})
            assert outcome.code == 0, outcome.stderr
            assert_cut_in(outcome.stdout, key)

    def test_diff_locates_with_cut_tokens(self, tmp_path: Path) -> None:
        """`diff` of two inputs with the same long token names the place of a difference by the cut token."""
        token = KINDS["ascii"]
        a = written(tmp_path, token)
        b = tmp_path / "b.json"
        b.write_text(a.read_text().replace("[3.0, 4.0]", "[3.0, 5.0]"))
        outcome = run_attnx("diff", str(a), str(b), env={"COLUMNS": str(WIDTH)})
        assert outcome.code == 1, outcome.stderr
        assert_cut_in(outcome.stdout, token)
        assert f"query 0 {label(token)!r}" in outcome.stdout

    @pytest.mark.parametrize(
        ("size", "args"), [(10_000_000, ["run", "-s", "weights"]), (2_000_000, ["trace", "--query", "0"])]
    )
    def test_the_issues_sizes(self, tmp_path: Path, size: int, args: list[str]) -> None:
        """A 10,000,000-character token's weights table and a 2,000,000-character token's trace show it cut (they
        took more than 10 s; benchmarks/long_tokens.py times them)."""
        token = "A" + "x" * size + "Z"
        path = written(tmp_path, token)
        outcome = run_attnx(args[0], str(path), *args[1:], env={"COLUMNS": str(WIDTH)})
        assert outcome.code == 0, outcome.stderr
        assert_cut_in(outcome.stdout, token)

    def test_machine_output_keeps_the_whole_token(self, tmp_path: Path) -> None:
        """`run`, `trace` and `heads` in JSON, and `run` in JSON lines, write the token whole."""
        token, key = KINDS["combining"], KINDS["wide"]
        path = str(written(tmp_path, token, key))
        run = json.loads(run_attnx("run", path, "-f", "json").stdout)
        trace = json.loads(run_attnx("trace", path, "--query", "0", "-f", "json").stdout)
        heads = json.loads(run_attnx("heads", path, "-f", "json").stdout)
        first = json.loads(run_attnx("run", path, "-f", "jsonl").stdout.splitlines()[0])
        assert (run["tokens"][0], run["key_tokens"][0], trace["token"]) == (token, key, token)
        assert (heads["tokens"][0], first["query_token"]) == (token, token)

"""Enormous tokens: every place that shows a token shows its two ends around `…`, cut before anything measures it;
machine output keeps the whole text."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from attnx.text import LABEL_LIMIT, inert, label
from tests.runner import run_attnx

# Tokens of 300,000 characters (the issue saw 2 and 10 million; the cut is the same), each kind of text a token can be.
KINDS = {
    "ascii": "A" + "x" * 300_000 + "Z",
    "wide": "猫" + "字" * 300_000 + "尾",
    "combining": "e" + "\u0301" * 300_000 + "!",
    "controls": "\x1b[2J" + "\x07" * 300_000 + "\u202e",
}


def written(folder: Path, query: str, key: str | None = None) -> Path:
    """A two-token input whose query 0 (and, as cross-attention, key 0) is the long one."""
    document = {"q": [[1.0, 0.0], [0.0, 1.0]], "k": [[1.0, 0.0], [0.0, 1.0]], "v": [[1.0, 2.0], [3.0, 4.0]],
                "tokens": [query, "b"]}  # fmt: skip
    if key is not None:
        document["key_tokens"] = [key, "c"]
    path = folder / "long.json"
    path.write_text(json.dumps(document))
    return path


class TestLabel:
    """``label`` cuts a long token in its middle, keeping both ends."""

    def test_short_tokens_are_untouched(self) -> None:
        """A token of the limit's length or less comes back as it is."""
        assert label("cat") == "cat" and label("x" * LABEL_LIMIT) == "x" * LABEL_LIMIT

    @pytest.mark.parametrize("kind", KINDS)
    def test_long_tokens_keep_their_ends(self, kind: str) -> None:
        """Limit characters, the first and last kept around one `…`; escapes after the cut stay whole and inert."""
        token = KINDS[kind]
        shown = label(token)
        assert len(shown) == LABEL_LIMIT and shown.count("…") == 1
        assert token.startswith(shown.split("…")[0]) and token.endswith(shown.split("…")[1])
        made_inert = inert(shown)
        assert made_inert.isprintable() and len(made_inert) <= 10 * LABEL_LIMIT


class TestEveryView:
    """Each command that shows tokens shows them cut, at once; JSON keeps the whole token."""

    @pytest.mark.parametrize("kind", ["ascii", "wide", "combining"])
    @pytest.mark.parametrize(
        "args",
        [["run", "-s", "weights"], ["run", "--view", "heatmap"], ["trace", "--query", "0"], ["heads"],
         ["run", "-s", "output,heads"]],
    )  # fmt: skip
    def test_shown_cut(self, tmp_path: Path, kind: str, args: list[str]) -> None:
        """Every line is shorter than the terminal's 100 columns and holds the token's start, cut."""
        token = KINDS[kind]
        outcome = run_attnx(args[0], str(written(tmp_path, token)), *args[1:], env={"COLUMNS": "100"})
        assert outcome.code == 0, outcome.stderr
        lines = outcome.stdout.splitlines()
        assert max(len(line) for line in lines) <= 100
        start = inert(label(token).split("…")[0])
        assert any(start in line and "…" in line for line in lines)

    def test_cross_attention_keys(self, tmp_path: Path) -> None:
        """A long key token (key_tokens) is cut in the weights table and in the trace."""
        key = KINDS["ascii"]
        path = written(tmp_path, "q", key)
        for args in (["run", str(path), "-s", "weights"], ["trace", str(path), "--query", "0"]):
            outcome = run_attnx(*args, env={"COLUMNS": "100"})
            assert outcome.code == 0 and "Axxxxxxxxxxxxxx…" in outcome.stdout, outcome.stderr

    def test_json_keeps_the_whole_token(self, tmp_path: Path) -> None:
        """`run -f json` and `trace -f json` write the token whole."""
        token = KINDS["combining"]
        path = written(tmp_path, token)
        assert json.loads(run_attnx("run", str(path), "-f", "json").stdout)["tokens"][0] == token
        assert json.loads(run_attnx("trace", str(path), "--query", "0", "-f", "json").stdout)["token"] == token

    def test_explorer_panels(self, tmp_path: Path) -> None:
        """The explorer's token strip and heatmaps show the cut label (panels drawn without the app)."""
        from attnx.analysis.explore import Explorer
        from attnx.io import load_spec
        from attnx.render import explore as panels
        from attnx.text import console

        spec = load_spec(str(written(tmp_path, KINDS["ascii"])))
        state = Explorer(lambda _layer: spec, 1, spec.source, {})
        out = console(width=100, record=True, file=io.StringIO())
        out.print(panels.token_strip(state, 100))
        out.print(panels.head_panel(state, colour=False, width=100))
        shown = out.export_text()
        assert "Axxxxxxxxxxxxxx…" in shown and max(len(line) for line in shown.splitlines()) <= 100

"""Masking: the one value that says what a mask is and what it hides, and that no other module goes around."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.core.masks import Masking
from attnx.core.settings import AttentionSettings
from attnx.core.spec import AttentionSpec

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "attnx"

# The settings that make a mask (``causal``, ``window``) are read as attributes only here: by the value itself,
# by the settings' own checks, and where they are an input's value rather than a question about the mask (a flag,
# a family's config, a checkpoint's facts, the kernel checker's settings, the explorer's setting cycle). An
# engine, an analysis or a renderer asks ``spec.masking`` (or ``result.masking``), so a new kind of mask is a field
# of Masking and of the input schema, and no renderer. None: every read is allowed.
ALLOWED: dict[str, set[str] | None] = {
    "attnx/core/masks.py": None,
    "attnx/core/settings.py": {"self.window"},  # its __post_init__ checks the window
    "attnx/cli/flags.py": {"self.causal"},  # --causal, put in the spec as a setting
    "attnx/analysis/explore.py": {"settings.causal"},  # `c` cycles the causal setting: the value, not the mask
    "attnx/models/architecture.py": {"self.causal"},  # whether a family is a decoder (tied embeddings)
    "attnx/models/decoder.py": {"row.window", "self.attention(layer).kind.causal"},  # a family's default window, and
    # its layer's attention kind (attnx/models/stacks.py), read into the settings
    "attnx/models/families/bert.py": {"self.attention(layer).kind.causal"},  # as decoder.py's
    "attnx/models/families/gpt2.py": {"self.attention(layer).kind.causal"},  # as decoder.py's
    "attnx/models/families/t5.py": {"at.attention.kind.causal"},  # as decoder.py's
    "attnx/models/families/whisper.py": {"at.attention.kind.causal"},  # as T5's
    "attnx/models/seq2seq.py": {"at.attention.kind.causal"},  # as decoder.py's (BART, mBART, Marian)
    "attnx/models/stacks.py": {"attention.kind.causal"},  # a stack is causal where its self-attention's kind is
    "attnx/render/model.py": {"info.causal"},  # `attnx model`: a checkpoint's facts, not a spec's mask
    "attnx/testing.py": {"self.causal", "settings.causal", "settings.window"},  # the checker's settings build a spec
}


def mask_setting_reads(path: Path) -> set[str]:
    """Each ``X.causal`` or ``X.window`` read in ``path`` (a method called ``window`` is no setting)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("causal", "window") and id(node) not in called
    }


class TestNoModuleGoesAround:
    """Engines, analyses and renderers ask the value; only the modules that set a mask read its settings."""

    def test_only_the_allowed_modules_read_the_mask_settings(self) -> None:
        """No module outside ALLOWED reads ``.causal`` or ``.window``, and those inside read only what they list."""
        found = []
        for path in sorted(PACKAGE.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            allowed = ALLOWED.get(where, set())
            if allowed is not None:
                found += [f"{where}: {read}" for read in sorted(mask_setting_reads(path) - allowed)]
        assert not found, "ask spec.masking (attnx/core/masks.py) instead of reading the settings:\n" + "\n".join(found)

    def test_allowlist_is_still_needed(self) -> None:
        """Every read the list allows still happens: an entry no longer needed is taken out."""
        for where, allowed in ALLOWED.items():
            assert allowed is None or allowed <= mask_setting_reads(ROOT / where), where


def masking(*, explicit: object = None, padding: object = None, **rules: Any) -> Masking:
    """A Masking with ``rules`` (causal, window) and the mask and padding given as lists of booleans."""
    arrays = [None if a is None else np.asarray(a, dtype=bool) for a in (explicit, padding)]
    return Masking(**rules, explicit=arrays[0], padding=arrays[1])


def allowed(m: Masking, n: int, keys: int, rows: slice = slice(None)) -> np.ndarray | None:
    """``m.allowed`` for queries at positions 0..n − 1."""
    return m.allowed(np.arange(n), keys, rows)


class TestAllowed:
    """Which (query, key) pairs each kind of mask allows, as PyTorch's SDPA would."""

    def test_no_mask_allows_everything(self) -> None:
        """Without a mask nothing is built, and every key is within the limit."""
        m = Masking()
        assert allowed(m, 3, 4) is None and m.key_limit(np.arange(3), 4) == 4
        assert not m.masked and not m.future_hidden and not m.beyond_causal and not m.causal_only

    @pytest.mark.parametrize(("n", "m"), [(3, 5), (5, 3), (4, 4)])
    def test_causal_is_aligned_top_left(self, n: int, m: int) -> None:
        """Query i sees keys j ≤ i whatever N and M are: ``torch.ones(N, M).tril()``, as SDPA's ``is_causal``."""
        np.testing.assert_array_equal(allowed(Masking(causal=True), n, m), np.tril(np.ones((n, m), dtype=bool)))

    def test_a_window_keeps_the_last_keys(self) -> None:
        """Window 2: query i sees i − 1 and i; causal or not, the window hides the future."""
        expected = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=bool)
        for m in (Masking(window=2), Masking(causal=True, window=2)):
            np.testing.assert_array_equal(allowed(m, 4, 4), expected)
            assert m.future_hidden and m.beyond_causal and not m.causal_only and not m.plain_causal

    def test_a_file_mask_and_padding_combine_with_causal(self) -> None:
        """A given mask, padding and causal all block: a pair is allowed only where each allows it."""
        explicit = [[1, 1, 0], [0, 1, 1], [1, 1, 1]]
        m = masking(causal=True, explicit=explicit, padding=[False, False, True])
        np.testing.assert_array_equal(allowed(m, 3, 3), [[1, 0, 0], [0, 1, 0], [1, 1, 0]])
        assert m.masked and m.future_hidden and m.beyond_causal and not m.causal_only and m.plain_causal is False

    def test_padding_alone_hides_no_future(self) -> None:
        """Padding blocks its keys for every query and leaves the later keys visible."""
        m = masking(padding=[False, True, False])
        np.testing.assert_array_equal(allowed(m, 2, 3), [[1, 0, 1], [1, 0, 1]])
        assert m.masked and m.beyond_causal and not m.future_hidden and m.key_limit(np.arange(2), 3) == 3

    def test_rows_are_the_rows_of_the_whole(self) -> None:
        """Asked block by block, the rows and the key limit are those of the whole mask."""
        m = masking(window=3, explicit=np.tri(6, 7, 1), padding=[False] * 6 + [True])
        whole = allowed(m, 6, 7)
        assert whole is not None
        for rows in (slice(0, 2), slice(2, 5), slice(5, 6)):
            np.testing.assert_array_equal(allowed(m, 6, 7, rows), whole[rows])
            assert m.key_limit(np.arange(6), 7, rows) == rows.stop

    def test_causal_alone_is_the_fused_kernels(self) -> None:
        """Causal alone is a fused kernel's mask; padding beside it is still a plain causal rule."""
        assert Masking(causal=True).causal_only and Masking(causal=True).plain_causal
        padded = masking(causal=True, padding=[True, False])
        assert padded.plain_causal and not padded.causal_only


class TestShifted:
    """A diagnosis's wrong causal masks: one key late, one early, aligned bottom-right."""

    def test_shifts_move_the_causal_edge(self) -> None:
        """Shift s allows j ≤ i + s; bottom-right alignment is the shift M − N, and the padding stays."""
        m = masking(causal=True, padding=[False, False, False, True])
        late, early, right = (allowed(m.shifted(s), 2, 4) for s in (1, -1, 2))
        np.testing.assert_array_equal(late, [[1, 1, 0, 0], [1, 1, 1, 0]])
        np.testing.assert_array_equal(early, [[0, 0, 0, 0], [1, 0, 0, 0]])
        np.testing.assert_array_equal(right, [[1, 1, 1, 0], [1, 1, 1, 0]])
        assert not m.shifted(1).plain_causal and not m.shifted(1).causal_only
        assert m.shifted(-1).key_limit(np.arange(1), 4) == 0


class TestWords:
    """What the status line and a trace's title say of the mask."""

    @pytest.mark.parametrize(
        ("fields", "word", "note"),
        [
            ({}, "no mask", None),
            ({"causal": True}, "causal", None),
            ({"window": 4}, "window", "window 4"),
            ({"causal": True, "window": 4}, "causal", "window 4"),
        ],
    )
    def test_words(self, fields: dict[str, Any], word: str, note: str | None) -> None:
        """The explorer's word for the mask and the note a trace's title adds."""
        m = masking(**fields)
        assert (m.status_word, m.title_note) == (word, note)


class TestSpecMasking:
    """The spec's value is made from its settings, mask and padding, and made again when they change."""

    def test_spec_masking_is_its_settings_and_arrays(self) -> None:
        """``spec.masking`` holds the spec's causal setting, window, mask and padding; ``with_settings`` remakes it."""
        tokens = ("a", "b", "c")
        q = np.eye(3, 2)
        mask = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=bool)
        spec = AttentionSpec.build(q=q, k=q, v=q, heads=1, tokens=tokens, key_tokens=tokens, causal=True, mask=mask)
        assert spec.masking.causal and spec.masking.window is None and spec.masking.explicit is spec.mask
        np.testing.assert_array_equal(spec.allowed(), mask & np.tri(3, dtype=bool))
        windowed = spec.with_settings(window=1)
        assert windowed.masking.window == 1 and spec.masking.window is None
        np.testing.assert_array_equal(windowed.allowed(), mask & np.eye(3, dtype=bool))
        settings = AttentionSettings(heads=1, kv_heads=1, causal=True, window=2)
        assert (Masking.of(settings).causal, Masking.of(settings).window) == (True, 2)

"""SmolLM3: its layers without positions (NoPE) and windows read as transformers reads them, what is refused, and the
commands on it (a NoPE layer's trace has no RoPE).

The agreement with transformers layer by layer is ``TestAgreement`` (test_decoders.py) on the variant ``smollm3``
(rotary layers 0 and 2 around a NoPE layer 1 that slides).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnx.core.positions import Rotary
from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import describe
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built, run_reference
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import assert_close, forward
from tests.models.test_families import copy_of

TURNS = Rotary(theta=100.0)  # the variant's rotary layers


@pytest.fixture(scope="module")
def smollm3(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """no_rope_layers [1, 0, 1], use_sliding_window with a window of 4: layer 1 has no positions and slides."""
    return built("smollm3", tmp_path_factory)


def transformers_reading(path: Path) -> tuple[tuple[bool, ...], tuple[int | None, ...]]:
    """Whether each layer turns, and its window, as transformers' SmolLM3Config reads config.json (its masks give
    ``sliding_window`` to each sliding layer)."""
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoConfig.from_pretrained(path)
    turned = tuple(bool(flag) for flag in theirs.no_rope_layers[: theirs.num_hidden_layers])
    return turned, tuple(theirs.sliding_window if kind == "sliding_attention" else None for kind in theirs.layer_types)


def reading(path: Path) -> tuple[tuple[bool, ...], tuple[int | None, ...]]:
    """Whether each layer turns, and its window, as attnx reads config.json."""
    info = describe(path)
    return tuple(rotary is not None for rotary in info.rotaries), info.windows


class TestReading:
    """NoPE layers, windows and the default θ, as transformers reads them."""

    def test_nope_between_rotary_layers(self, smollm3: DecoderReference) -> None:
        """Layers 0 and 2 turn by θ 100; layer 1 has no positions and a window of 4; the spec says so."""
        info = describe(smollm3.path)
        assert info.rotaries == (TURNS, None, TURNS) and info.windows == (None, 4, None)
        assert info.rotary == TURNS and reading(smollm3.path) == transformers_reading(smollm3.path)
        spec = load_model_spec(smollm3.path, TEXT, 1)
        assert spec.settings.rotary is None and spec.settings.window == 4

    @pytest.mark.parametrize(
        "changes",
        [
            {"no_rope_layers": None, "layer_types": None},  # every 4th layer without: none of 3
            {"no_rope_layers": None, "layer_types": None, "no_rope_layer_interval": 2},
            {"no_rope_layers": None, "layer_types": None, "no_rope_layer_interval": 3},
            {"layer_types": None, "use_sliding_window": False},
            {"no_rope_layers": [0, 1, 1, 0]},  # longer than the layers, as transformers allows
            {"use_sliding_window": False},  # the listed sliding layer keeps its window, as transformers' masks do
        ],
    )
    def test_derived_as_transformers_derives(self, smollm3: DecoderReference, tmp_path: Path, changes: dict) -> None:
        """Lists absent or changed: the same layers turn and slide as in transformers' reading."""
        path = copy_of(smollm3, tmp_path)
        edit_config(path, **changes)
        assert reading(path) == transformers_reading(path)

    def test_default_theta(self, smollm3: DecoderReference, tmp_path: Path) -> None:
        """Without rope_parameters the rotary layers turn by SmolLM3's θ 2·10⁶, transformers' default."""
        transformers = pytest.importorskip("transformers")
        path = copy_of(smollm3, tmp_path)
        edit_config(path, rope_parameters=None)
        theta = transformers.AutoConfig.from_pretrained(path).rope_parameters["rope_theta"]
        assert describe(path).rotaries == (Rotary(2e6), None, Rotary(2e6)) and theta == 2e6

    def test_listed_window_without_use_sliding_window(self, smollm3: DecoderReference, tmp_path: Path) -> None:
        """use_sliding_window false with layer_types listing layer 1 sliding: transformers' mask still slides, and so
        does attnx: every layer equals transformers' within 1e-10 (float64)."""
        path = copy_of(smollm3, tmp_path)
        edit_config(path, use_sliding_window=False)
        weights, hidden = forward(path, "float64")
        theirs, their_hidden = run_reference(path, smollm3.ids, "float64")
        for ours, reference in zip([*weights, *hidden], [*theirs, *their_hidden], strict=True):
            assert_close(ours, reference, "float64")


class TestNopeMatters:
    """Turning the NoPE layer by the others' RoPE moves its weights by more than 1e-3."""

    def test_rotary_on_the_nope_layer(self, smollm3: DecoderReference) -> None:
        from attnx.engines import compute

        spec = load_model_spec(smollm3.path, TEXT, 1, on=Placement(dtype="float64"))
        turned = compute(spec.with_settings(rotary=TURNS), "numpy", dtype="float64").weights
        assert np.abs(turned - smollm3.attentions["float64"][1]).max() > 1e-3


class TestRefused:
    """A NoPE list or a window attnx cannot read as transformers does is one ModelError naming it."""

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"no_rope_layers": [1, 0]}, r"no_rope_layers must list 1 \(RoPE\) or 0 \(none\) for each of the 3 layers"),
            ({"no_rope_layers": [1, 2, 1]}, "no_rope_layers must list 1"),
            ({"no_rope_layers": "all"}, "no_rope_layers must list 1"),
            ({"sliding_window": None}, "layer_types has sliding layers, but no sliding_window"),
            ({"partial_rotary_factor": 0.5}, r"partial_rotary_factor 0.5 is not read by smollm3 \(SmolLM3\)"),
        ],
    )  # fmt: skip
    def test_refused(self, smollm3: DecoderReference, tmp_path: Path, changes: dict, message: str) -> None:
        """Each in one line naming the key."""
        path = copy_of(smollm3, tmp_path)
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=f"config.json: {message}"):
            describe(path)


class TestCommands:
    """model, trace, heads --layer all, ablate and rollout on a SmolLM3."""

    def test_model_table(self, smollm3: DecoderReference) -> None:
        """The NoPE layer is named among the positions; its window too."""
        out = invoke("model", smollm3.path).stdout
        assert "SmolLM3 (pre-RMSNorm causal decoder)" in out
        assert "RoPE θ 100 (half pairs) on layers 0, 2; none (NoPE) on layer 1" in out
        data = json.loads(invoke("model", smollm3.path, "-f", "json").stdout)
        assert data["rope_layers"][1] is None and data["rope_layers"][0]["theta"] == 100.0

    def test_trace_of_a_nope_layer(self, smollm3: DecoderReference) -> None:
        """Layer 1's trace has no RoPE: no Q or K before RoPE, no bands by pair; layer 0's has them, adding up."""
        args = ["--model", smollm3.path, "--text", TEXT, "--query", "6", "-f", "json"]
        nope = json.loads(invoke("trace", *args, "--layer", "1").stdout)
        head = nope["heads"][0]
        assert nope["rope"] is None and "q_before_rope" not in head
        assert all(key.get("bands") is None for key in head["keys"])
        text = invoke("trace", *args[:-2], "--layer", "1").stdout
        assert "RoPE" not in text  # no "after RoPE", "before RoPE" or "Q·K by RoPE pair"
        turned = json.loads(invoke("trace", *args, "--layer", "0").stdout)
        key = turned["heads"][0]["keys"][6]
        assert turned["rope"]["theta"] == 100.0 and abs(sum(key["bands"]) - key["raw"]) < 1e-12

    def test_heads_ablate_rollout(self, smollm3: DecoderReference) -> None:
        """The model view, an ablation of the NoPE layer's head and the rollout exit 0 with every layer in them."""
        model = ["--model", smollm3.path, "--text", TEXT]
        view = json.loads(invoke("heads", *model, "--layer", "all", "-f", "json").stdout)
        assert len(view["layers"]) == 3 and all(len(layer["heads"]) == 4 for layer in view["layers"])
        assert "Dropping L1H0" in invoke("ablate", *model, "--head", "L1H0").stdout
        assert "L2" in invoke("rollout", *model, "--query", "6").stdout

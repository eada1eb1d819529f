"""Gemma 3 (``gemma3_text``): both config forms read as transformers reads them, each difference matters, the logits'
cap, what is refused, and the commands on it.

The agreement with transformers layer by layer is ``TestAgreement`` (test_decoders.py) on the variants ``gemma3``
(layer_types given, rope_parameters by layer type) and ``gemma3_flat`` (flat rope keys, sliding_window_pattern).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from attnx.core.inputs import ProjectedInputs
from attnx.core.positions import RopeScaling, Rotary
from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.rope import SLIDING
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built
from tests.models.test_checkpoint import edit_config
from tests.models.test_families import copy_of

WIDE = Rotary(theta=1e6, scaling=RopeScaling("linear", 8.0))  # the variant gemma3's full layer (0)
LOCAL = Rotary(theta=1e4)  # its sliding layers (1, 2)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """layer_types (full, sliding, sliding), rope_parameters by layer type, windows of 4, scalar 24, logits cap 30."""
    return built("gemma3", tmp_path_factory)


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """config.json as older Gemma 3 configs hold it: rope_theta, rope_scaling, rope_local_base_freq, pattern 3."""
    return built("gemma3_flat", tmp_path_factory)


def transformers_reading(path: Path) -> tuple[tuple[Rotary, ...], tuple[int | None, ...]]:
    """Each layer's rotary positions and window as transformers' Gemma3TextConfig reads config.json."""
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoConfig.from_pretrained(path)
    rotaries = tuple(
        Rotary.from_config(theirs.rope_parameters[kind], head_dim=theirs.head_dim, max_position_embeddings=64)
        for kind in theirs.layer_types
    )
    return rotaries, tuple(theirs.sliding_window if kind == SLIDING else None for kind in theirs.layer_types)


class TestReading:
    """What attnx reads from either config form, equal to what transformers reads."""

    def test_nested_by_layer_type(self, gemma3: DecoderReference) -> None:
        """The full layer 0 turns by θ 10⁶ linear ×8, the sliding layers by θ 10⁴ in windows of 4; scores × 24^-½,
        uncapped; each head's q and k normed (d_k 16)."""
        info = describe(gemma3.path)
        assert info.rotaries == (WIDE, LOCAL, LOCAL) and info.windows == (None, 4, 4) and info.qk_norm
        spec = load_model_spec(gemma3.path, TEXT, 1)
        assert spec.multiplier == pytest.approx(24**-0.5, rel=1e-15) and spec.settings.softcap is None
        inputs = spec.inputs
        assert isinstance(inputs, ProjectedInputs) and inputs.q_norm is not None and inputs.k_norm is not None
        assert inputs.q_norm.weight.shape == (16,)

    def test_flat_keys_and_pattern(self, flat: DecoderReference) -> None:
        """No layer_types, no rope_parameters: pattern 3 makes layer 2 full, by rope_theta 2·10⁵ and rope_scaling;
        the sliding layers turn by rope_local_base_freq 100; query_pre_attn_scalar absent is 256."""
        config = json.loads((flat.path / "config.json").read_text())
        assert not {"layer_types", "rope_parameters", "query_pre_attn_scalar"} & set(config)
        info = describe(flat.path)
        assert info.rotaries == (Rotary(100.0), Rotary(100.0), Rotary(2e5, scaling=RopeScaling("linear", 8.0)))
        assert info.windows == (4, 4, None)
        assert load_model_spec(flat.path, TEXT, 0).multiplier == pytest.approx(256**-0.5, rel=1e-15)

    @pytest.mark.parametrize("name", ["gemma3", "gemma3_flat"])
    def test_as_transformers_reads_it(self, tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
        """Each layer's rotary positions and window are those of transformers' reading of the same config.json."""
        path = built(name, tmp_path_factory).path
        info = describe(path)
        assert (info.rotaries, info.windows) == transformers_reading(path)

    @pytest.mark.parametrize(
        "changes",
        [
            {"sliding_window_pattern": None},  # 6 by default: all three layers slide
            {"sliding_window_pattern": 2},
            {"rope_scaling": None, "rope_theta": None, "rope_local_base_freq": None},  # 10⁶ and 10⁴
        ],
    )
    def test_defaults_and_patterns(self, flat: DecoderReference, tmp_path: Path, changes: dict) -> None:
        """The defaults transformers fills in where config.json is silent, read the same."""
        path = copy_of(flat, tmp_path)
        edit_config(path, **changes)
        info = describe(path)
        assert (info.rotaries, info.windows) == transformers_reading(path)

    def test_nested_sliding_entry_without_theta(self, gemma3: DecoderReference, tmp_path: Path) -> None:
        """A sliding entry without rope_theta turns by rope_local_base_freq, as transformers fills it."""
        path = copy_of(gemma3, tmp_path)
        nested = {
            "full_attention": {"rope_type": "linear", "factor": 8.0},
            "sliding_attention": {"rope_type": "default"},
        }
        edit_config(path, rope_parameters=nested, rope_theta=3e5, rope_local_base_freq=500.0)
        info = describe(path)
        assert info.rotaries[:2] == (Rotary(3e5, scaling=RopeScaling("linear", 8.0)), Rotary(500.0))
        assert (info.rotaries, info.windows) == transformers_reading(path)


class TestDifferencesMatter:
    """Each difference the variant exercises moves layer weights by more than 1e-3 when left out."""

    def differs(self, reference: DecoderReference, layer: int, **changes: object) -> float:
        """The largest difference from transformers' float64 weights of the layer's spec with ``changes``."""
        from attnx.engines import compute

        spec = load_model_spec(reference.path, TEXT, layer, on=Placement(dtype="float64"))
        inputs = {key: changes.pop(key) for key in ("q_norm", "k_norm") if key in changes}
        if inputs:
            spec = dataclasses.replace(spec, inputs=dataclasses.replace(spec.inputs, **inputs))
        weights = compute(spec.with_settings(**changes), "numpy", dtype="float64").weights
        return float(np.abs(weights - reference.attentions["float64"][layer]).max())

    def test_each_setting(self, gemma3: DecoderReference) -> None:
        """Within 1e-10 as read; apart without the full layer's scaling, with the full layer's rope on a sliding
        layer, without the window, without QK-norm, with Gemma 2's default scale."""
        assert self.differs(gemma3, 1) <= 1e-10
        assert self.differs(gemma3, 0, rotary=Rotary(1e6)) > 1e-3
        assert self.differs(gemma3, 1, rotary=WIDE) > 1e-3
        assert self.differs(gemma3, 2, window=None) > 1e-3
        assert self.differs(gemma3, 2, q_norm=None, k_norm=None) > 1e-3
        assert self.differs(gemma3, 1, scale="sqrt_dk") > 1e-3


class TestLogits:
    """The next-token logits, capped by final_logit_softcapping, equal transformers'."""

    def test_capped_logits(self, gemma3: DecoderReference) -> None:
        """Within 1e-5 of transformers' (float32) with the cap of 30; 1e-3 or more apart without it."""
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")
        model = transformers.AutoModelForCausalLM.from_pretrained(gemma3.path, attn_implementation="eager")
        with torch.no_grad():
            theirs = model(torch.tensor([gemma3.ids])).logits[0].numpy()
        with open_model(gemma3.path, "float32") as ours:
            arch = ours.architecture
            hidden = ours.run(TEXT, layer=ours.layers - 1).finish()
            capped = arch.logits(hidden)
            arch.final_softcap = None
            uncapped = arch.logits(hidden)
        bound = 1e-5 * max(1.0, float(np.abs(theirs).max()))
        assert np.abs(capped - theirs).max() <= bound < 1e-3 <= np.abs(uncapped - theirs).max()


class TestRefused:
    """What transformers' Gemma 3 would run otherwise, or not at all, is one ModelError naming it."""

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"attn_logit_softcapping": 50.0}, r"attn_logit_softcapping 50.0 is not read by gemma3_text \(Gemma 3\)"),
            ({"rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}},
             "rope_parameters must be keyed by layer type .* transformers ignores a flat one"),
            ({"rope_parameters": {"full_attention": {"rope_theta": 1e6}}},
             "rope_parameters has no entry for the sliding_attention layers"),
            ({"use_bidirectional_attention": True}, "use_bidirectional_attention True is not read by gemma3_text"),
        ],
    )  # fmt: skip
    def test_refused(self, gemma3: DecoderReference, tmp_path: Path, changes: dict, message: str) -> None:
        """Each names the key in one line."""
        path = copy_of(gemma3, tmp_path)
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=f"config.json: {message}"):
            describe(path)

    def test_sliding_layers_need_a_window(self, gemma3: DecoderReference, tmp_path: Path) -> None:
        """sliding_window null (transformers cannot make the sliding layers' mask) is refused; absent, it is 4096."""
        path = copy_of(gemma3, tmp_path)
        edit_config(path, sliding_window=None)
        assert describe(path).windows == (None, 4096, 4096)
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "sliding_window": None}))
        with pytest.raises(
            ModelError, match=r"config.json: sliding_window is null, but layer_types has sliding layers"
        ):
            describe(path)

    def test_relabelled_gemma2_is_refused(self, gemma3: DecoderReference, tmp_path: Path) -> None:
        """Gemma 2's checkpoint under gemma3_text's name: Gemma2ForCausalLM is not a Gemma 3 class."""
        path = copy_of(gemma3, tmp_path)
        edit_config(path, architectures=["Gemma2ForCausalLM"])
        with pytest.raises(ModelError, match="architectures names Gemma2ForCausalLM, not a gemma3_text class"):
            describe(path)


class TestCommands:
    """model, trace, heads --layer all, ablate and rollout on a Gemma 3."""

    def test_model_table(self, gemma3: DecoderReference) -> None:
        """The family, QK-norm, the rope of each layer type and the windows, in words."""
        out = invoke("model", gemma3.path).stdout
        assert "Gemma 3 (pre-RMSNorm causal decoder)" in out and "gemma3_text (Gemma3ForCausalLM)" in out
        assert "RoPE θ 1e+06 (half pairs, linear ×8) on layer 0; RoPE θ 10000" in out
        assert "QK-norm     RMSNorm on each head's q and k" in out and "4 keys on layers 1, 2 (2 of 3)" in out

    def test_trace_bands_by_layer_type(self, gemma3: DecoderReference) -> None:
        """trace on the full layer and a sliding one: each layer's rope, the bands adding up to the raw score."""
        for layer, rope in (("0", WIDE), ("1", LOCAL)):
            args = ["--model", gemma3.path, "--text", TEXT, "--layer", layer, "--query", "6", "-f", "json"]
            data = json.loads(invoke("trace", *args).stdout)
            assert data["rope"]["theta"] == rope.theta and (data["rope"]["scaling"] is None) is (rope.scaling is None)
            key = data["heads"][0]["keys"][6]
            assert len(key["bands"]) == 8 and abs(sum(key["bands"]) - key["raw"]) < 1e-12

    def test_heads_ablate_rollout(self, gemma3: DecoderReference) -> None:
        """The model view, an ablation and the rollout exit 0 with every layer in them."""
        model = ["--model", gemma3.path, "--text", TEXT]
        view = json.loads(invoke("heads", *model, "--layer", "all", "-f", "json").stdout)
        assert len(view["layers"]) == 3 and all(len(layer["heads"]) == 4 for layer in view["layers"])
        assert "Dropping L1H0" in invoke("ablate", *model, "--head", "L1H0").stdout
        assert "L2" in invoke("rollout", *model, "--query", "6").stdout


class TestAbsentKeys:
    """A key config.json leaves out means what the family's transformers config fills in."""

    @pytest.mark.parametrize(("name", "scale", "softcap", "final"), [("gemma2", 256**-0.5, 50.0, 30.0),
                                                                    ("gemma3", 256**-0.5, None, None)])  # fmt: skip
    def test_scale_and_caps(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, name: str, scale: float,
        softcap: float | None, final: float | None,
    ) -> None:  # fmt: skip
        """Gemma 2: scalar 256, caps 50 and 30 (Gemma2Config); Gemma 3: scalar 256, no caps (Gemma3TextConfig)."""
        path = copy_of(built(name, tmp_path_factory), tmp_path)
        keys = ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping")
        edit_config(path, **dict.fromkeys(keys))
        with open_model(path) as model:
            arch = model.architecture
            assert (arch.scale, arch.softcap, arch.final_softcap) == pytest.approx((scale, softcap, final))  # type: ignore[attr-defined]

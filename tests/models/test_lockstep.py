"""Forward passes in lockstep (attnx/models/lockstep.py): ablation sweeps and head detection equal their passes one by
one, read each layer's weights once, and stay within the element cap."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from attnx import engines
from attnx.analysis.detect import Detector
from attnx.analysis.effects import Ablations, kl_divergence, log_softmax
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import MASK, WEIGHTS
from attnx.engines import alike
from attnx.engines.placement import Placement
from attnx.limits import Limits
from attnx.models import Model, open_model
from attnx.models.checkpoint import Checkpoint
from attnx.models.lockstep import batches
from attnx.models.tokenize import Encoded
from attnx.workflows.detection import detect_heads
from attnx.workflows.effects import ablations
from tests.models.checkpoints import TEXT, Reference
from tests.models.decoders import DecoderReference, built


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    return built("mixtral", tmp_path_factory)


def one_by_one(model: Model, encoded: Encoded, heads: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, ...]:
    """The effect of dropping ``heads``, computed alone from a fresh pass: shift, and KL and top token (or None)."""
    intact = model.run(encoded, layer=model.layers - 1).finish()
    drop: dict[int, tuple[int, ...]] = {}
    for layer, head in heads:
        drop[layer] = (*drop.get(layer, ()), head)
    after = model.run(encoded, layer=model.layers - 1).branch(drop).finish()
    shift = np.linalg.norm(after - intact, axis=1) / np.linalg.norm(intact, axis=1)
    if not model.architecture.has_lm_head:
        return (shift,)
    p, q = (log_softmax(model.architecture.logits(h)) for h in (intact, after))
    return shift, kl_divergence(p, q), q.argmax(axis=1)


def assert_as_alone(found: Ablations, model: Model, encoded: Encoded) -> None:
    """Every effect of ``found`` equals the same ablation run alone (float64: to 1e-12)."""
    for effect in found.effects:
        alone = one_by_one(model, encoded, effect.dropped)
        np.testing.assert_allclose(effect.shift, alone[0], rtol=1e-12, atol=1e-15)
        if len(alone) > 1:
            assert effect.kl is not None
            np.testing.assert_allclose(effect.kl, alone[1], rtol=1e-9, atol=1e-15)
            np.testing.assert_array_equal(effect.top_after, alone[2])


class TestAblationSweep:
    """A sweep's ablations run together from their layer on, and each equals itself run alone."""

    @pytest.mark.parametrize("name", ["llama", "mixtral"])
    def test_every_head_equals_its_pass_alone(self, name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        """GQA, rotary positions, biases (Llama) and routed experts over stacked rows (Mixtral): each head of every
        layer dropped in the sweep moves the outputs as it does alone."""
        reference = built(name, tmp_path_factory)
        with open_model(reference.path) as model:
            encoded = model.encode(TEXT)
            found = ablations(model, encoded)
            assert len(found.effects) == model.layers * model.architecture.heads
            assert max(float(effect.mean_shift) for effect in found.effects) > 1e-3  # the drops do move things
            assert_as_alone(found, model, encoded)

    def test_on_torch(self, llama: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """On the torch engine the sweep's streams stay torch tensors through the stacked rest of each layer, and
        every effect equals the NumPy engine's sweep (float64: to 1e-10)."""
        torch = pytest.importorskip("torch")
        from attnx.models import lockstep

        kinds: set[type] = set()
        stack = lockstep.stacked
        monkeypatch.setattr(lockstep, "stacked", lambda passes: kinds.add(type(found := stack(passes))) or found)
        with open_model(llama.path) as model:
            encoded = model.encode(TEXT)
            sweeps = [ablations(model, encoded, layers=[1, 2], on=Placement(engine)) for engine in ("torch", "numpy")]
        assert kinds == {torch.Tensor, np.ndarray}
        for ours, theirs in zip(*(sweep.effects for sweep in sweeps), strict=True):
            assert ours.dropped == theirs.dropped and ours.kl is not None and theirs.kl is not None
            np.testing.assert_allclose(ours.shift, theirs.shift, rtol=1e-10, atol=1e-13)
            np.testing.assert_allclose(ours.kl, theirs.kl, rtol=1e-8, atol=1e-13)
            np.testing.assert_array_equal(ours.top_after, theirs.top_after)

    def test_heads_of_several_layers_together(self, llama: DecoderReference) -> None:
        """A set of heads across layers joins at its first layer and equals the set dropped alone."""
        with open_model(llama.path) as model:
            encoded = model.encode(TEXT)
            sets = [((0, 1), (2, 3)), ((1, 0), (1, 2)), ((2, 1),)]
            assert_as_alone(ablations(model, encoded, sets), model, encoded)

    def test_encoder_without_lm_head(self, bert: Reference) -> None:
        """A BERT (no LM head, no causal mask): the shifts equal each pass alone, no KL."""
        with open_model(bert.path) as model:
            encoded = model.encode(TEXT)
            found = ablations(model, encoded, layers=[1])
            assert all(effect.kl is None for effect in found.effects)
            assert_as_alone(found, model, encoded)

    def test_a_small_element_cap_splits_the_work_not_the_answer(self, gpt2: Reference) -> None:
        """Under a cap that allows only a few copies, MLP rows and logit columns at a time, the sweep equals the
        one under the default caps."""
        answers = []
        for limits in (Limits(), Limits(max_elements=4000)):
            with open_model(gpt2.path, limits=limits) as model:
                encoded = model.encode(TEXT)
                answers.append(ablations(model, encoded).effects)
        assert len(answers[0]) == len(answers[1]) == 12
        for default, capped in zip(*answers, strict=True):
            np.testing.assert_allclose(capped.shift, default.shift, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(capped.kl, default.kl, rtol=1e-9, atol=1e-15)
            np.testing.assert_array_equal(capped.top_after, default.top_after)

    def test_each_layer_attention_goes_to_the_engine_at_once(
        self, llama: DecoderReference, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """At each layer, the attention of every copy of the text there (the intact pass and each ablation joined
        so far) is computed in one stacked engine call (``attnx.engines.alike``), none alone."""
        stacked: list[int] = []
        alone = Counter[str]()
        original, single = alike.projected_copies, engines.compute

        def counting(spec: AttentionSpec, xs: np.ndarray, *args: Any) -> np.ndarray | None:
            stacked.append(len(xs))
            return original(spec, xs, *args)

        def one(spec: AttentionSpec, *args: Any, **kwargs: Any) -> AttentionResult:
            alone[spec.source] += 1
            return single(spec, *args, **kwargs)

        monkeypatch.setattr(alike, "projected_copies", counting)
        monkeypatch.setattr(engines, "compute", one)
        with open_model(llama.path) as model:
            found = ablations(model, model.encode(TEXT))
            heads = model.architecture.heads
        assert stacked == [1 + heads * (layer + 1) for layer in range(model.layers)] and not alone
        assert len(found.effects) == model.layers * heads

    def test_each_layer_is_read_once_per_sweep(self, llama: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """Sweeping every head reads each layer's weights once in all: the intact pass and every ablation run
        together (one by one, layer l's would be read once per head of the layers up to l, and once more)."""
        reads: Counter[str] = Counter()
        original = Checkpoint._read

        def counting(self: Checkpoint, part: object, full: str, index: slice) -> np.ndarray:
            reads[full] += 1
            return original(self, part, full, index)

        monkeypatch.setattr(Checkpoint, "_read", counting)
        with open_model(llama.path) as model:
            ablations(model, model.encode(TEXT))
        layered = {name: count for name, count in reads.items() if ".layers." in name}
        last = max(int(name.split(".layers.")[1].split(".")[0]) for name in layered)
        assert last == 2 and layered and set(layered.values()) == {1}, layered


class TestDetectionBatch:
    """Head detection runs its sequences together and scores each as it would alone."""

    @pytest.mark.parametrize(
        ("texts", "lengths"),
        [
            ([TEXT, "the mat", "it was tired because the cat sat on it"], 3),
            ([TEXT, "it was tired because the cat sat on the mat", "the mat"], 2),
        ],
        ids=["lengths differ", "two of one length"],
    )
    def test_scores_and_records_equal_each_sequence_alone(
        self, llama: DecoderReference, texts: list[str], lengths: int
    ) -> None:
        """Sequences of different lengths, and two of one length (their attention computed together, weights
        and all): every measure's tally and each sequence's record equal those of the sequences run one at a time."""
        with open_model(llama.path) as model:
            encoded = [model.encode(text) for text in texts]
            assert len({len(e.ids) for e in encoded}) == lengths
            together, records = detect_heads(model, encoded, source="texts")
            alone = Detector()
            for index, sequence in enumerate(encoded):
                forward = model.run(sequence, layer=model.layers - 1)
                ids = [int(i) for i in sequence.ids]
                own = [
                    alone.add(layer, forward.step((WEIGHTS, MASK)), ids, (0, *forward.special_keys))
                    for layer in range(model.layers)
                ]
                assert records[index].index == index and records[index].tokens == sequence.tokens
                assert np.allclose(
                    [[[v if v is not None else np.nan for v in h.values()] for h in layer] for layer in own],
                    [[[v if v is not None else np.nan for v in h.values()] for h in layer] for layer in records[index].layers],
                    rtol=1e-12, atol=1e-15, equal_nan=True,
                )  # fmt: skip
            reference = alone.done(model="m", architecture="a", source="texts")
            assert (together.sequences, together.tokens) == (3, sum(len(e.ids) for e in encoded))
            for measure in ("previous-token", "duplicate-token", "induction", "sink", "entropy"):
                np.testing.assert_allclose(together.grid(measure), reference.grid(measure), rtol=1e-12, equal_nan=True)


class TestBatches:
    """``batches`` groups items in order within a budget."""

    def test_groups_in_order_within_the_budget(self) -> None:
        """Sizes 3, 3, 2, 5, 1 under a budget of 6: [3, 3], [2], [5, 1]; an item over the budget stands alone."""
        sizes = [3, 3, 2, 5, 1]
        assert list(batches(sizes, lambda size: size, 6)) == [[3, 3], [2], [5, 1]]
        assert list(batches([9, 1], lambda size: size, 6)) == [[9], [1]]
        assert list(batches([], lambda size: size, 6)) == []

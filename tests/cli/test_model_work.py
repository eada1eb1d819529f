"""Work on a model in the order a user needs it: the query token checked before any layer runs, and progress that
moves as the layers of a forward pass, an ablation sweep and a detection run, not all at the end."""

from __future__ import annotations

from typing import Any

import pytest

from attnx import workflows as model_runs
from attnx.limits import Limits
from attnx.models import ForwardPass, open_model
from attnx.models.lockstep import Lockstep
from tests.models.checkpoints import TEXT, Reference
from tests.runner import run_attnx


class Layers:
    """Counts the layers the forward passes of a process run (each pass's ``take``, and each lockstep step)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken = 0
        self.steps = 0
        take, step, advance = ForwardPass.take, Lockstep.step, Lockstep.advance

        def counted_take(forward: ForwardPass, projected: Any) -> None:
            self.taken += 1
            take(forward, projected)

        def counted_step(together: Lockstep, *args: Any, **kwargs: Any) -> Any:
            self.steps += 1
            return step(together, *args, **kwargs)

        def counted_advance(together: Lockstep) -> None:
            self.steps += 1
            advance(together)

        monkeypatch.setattr(ForwardPass, "take", counted_take)
        monkeypatch.setattr(Lockstep, "step", counted_step)
        monkeypatch.setattr(Lockstep, "advance", counted_advance)


@pytest.fixture
def layers(monkeypatch: pytest.MonkeyPatch) -> Layers:
    """The layers run so far, counted."""
    return Layers(monkeypatch)


class TestQueryBeforeLayers:
    """trace and rollout tokenize the text and resolve --token first: a token not in it, or in it twice, is refused
    (exit 2, the message it always had) before any layer runs."""

    @pytest.mark.parametrize("command", [["trace", "--layer", "2"], ["rollout"]])
    @pytest.mark.parametrize(
        ("token", "message"),
        [
            ("zebra", "token 'zebra' is not in the input; tokens: [CLS], the, cat, sat, on, the, mat"),
            ("the", "token 'the' appears at queries 1, 5; pick one by its position with --query"),
        ],
    )
    def test_refused_before_any_layer(
        self, bert: Reference, layers: Layers, command: list[str], token: str, message: str
    ) -> None:
        """A token the text lacks, or holds twice, is refused with no layer run."""
        outcome = run_attnx(*command, "--model", str(bert.path), "--text", TEXT, "--token", token)
        assert outcome.code == 2 and message in outcome.stderr and outcome.stderr.count("\n") == 1
        assert layers.taken == 0

    def test_no_query_named(self, bert: Reference, layers: Layers) -> None:
        """trace with neither --token nor --query lists the text's tokens before any layer runs."""
        outcome = run_attnx("trace", "--model", str(bert.path), "--text", TEXT, "--layer", "2")
        assert outcome.code == 2 and "pick the query to trace with --token or --query; tokens: [CLS]" in outcome.stderr
        assert layers.taken == 0

    @pytest.mark.parametrize(("command", "ran"), [(["trace", "--layer", "2"], 2), (["rollout"], 3)])
    def test_a_token_in_the_text_runs(self, bert: Reference, layers: Layers, command: list[str], ran: int) -> None:
        """A token the text holds once runs the layers the command needs (the layers before 2; all 3 for rollout)."""
        outcome = run_attnx(*command, "--model", str(bert.path), "--text", TEXT, "--token", "cat")
        assert outcome.code == 0, outcome.stderr
        assert layers.taken == ran


class Recorder:
    """A progress callback that records, at each call, the layers run so far with it."""

    def __init__(self, layers: Layers) -> None:
        self.layers = layers
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total, self.layers.steps))


class TestProgressMoves:
    """Progress is reported as each layer of the batched passes is run, never all at once when the work is done."""

    def test_ablate_sweep(self, gpt2: Reference, layers: Layers) -> None:
        """One batch of every head: one call per layer, each as that layer is run (the last once measured)."""
        recorder = Recorder(layers)
        with open_model(gpt2.path) as model:
            found = model_runs.ablate(model, TEXT, progress=recorder)
            count = model.layers
        assert len(found.effects) == count * found.heads > count
        assert recorder.calls == [(step, count, step) for step in range(1, count + 1)]

    def test_ablate_in_batches(self, gpt2: Reference, layers: Layers) -> None:
        """Batches cut by the element cap: each batch's layers counted as they run, from its first dropped layer."""
        recorder = Recorder(layers)
        with open_model(gpt2.path, limits=Limits(max_elements=3_000)) as model:  # 9 copies of 10 tokens at once
            found = model_runs.ablate(model, TEXT, progress=recorder)
            count, heads = model.layers, model.architecture.heads
        assert (count, heads, len(found.effects)) == (3, 4, 12)
        # L0H0 … L2H0 from layer 0 with the intact pass (3 layers), then L2H1 … L2H3 from layer 2 (1 layer)
        assert recorder.calls == [(1, 4, 1), (2, 4, 2), (3, 4, 3), (4, 4, 4)]

    def test_detect(self, gpt2: Reference, layers: Layers) -> None:
        """Every batch of sequences: one call per layer as it is run."""
        recorder = Recorder(layers)
        with open_model(gpt2.path, limits=Limits(max_elements=1_536)) as model:  # 4 sequences of 12 tokens at once
            detection, records = model_runs.detect(model, samples=9, length=6, progress=recorder)
            count = model.layers
        assert len(records) == 9 and detection.sequences == 9 and count == 3
        assert recorder.calls == [(step, 9, step) for step in range(1, 10)]  # 3 batches of 3 layers

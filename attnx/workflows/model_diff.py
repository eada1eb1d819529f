"""Two checkpoints of one architecture on one text, run side by side layer by layer and compared head by head.

``compare_models`` checks that they compare (one family, one shape, the same tokens), runs both, one layer of each
held at a time, and measures each layer as it goes; the values it returns (``ModelComparison``) and the measures
live in ``attnx.analysis.model_diff``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from attnx.analysis.model_diff import LayerShift, ModelComparison, head_shifts, relative_shift
from attnx.core.tensors import WEIGHTS
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models import Model
from attnx.models.audio import AudioInput
from attnx.models.stacks import AttentionKind, Memory

if TYPE_CHECKING:  # pragma: no cover
    from attnx.models.tokenize import Encoded

# The sizes both sides must share, as ``Architecture`` names them.
SHARED = ("layers", "heads", "kv_heads", "head_dim", "d_model")


def check_comparable(a: Model, b: Model) -> None:
    """A ModelError naming the first difference when ``a`` and ``b`` are not one architecture of one shape."""
    first, second = a.architecture, b.architecture
    if first.name != second.name:
        raise ModelError(f"the models differ in architecture: A is {first.name}, B is {second.name}")
    for size in SHARED:
        if getattr(first, size) != getattr(second, size):
            raise ModelError(f"the models differ in {size}: A has {getattr(first, size)}, B {getattr(second, size)}")
    for mine, theirs in zip(a.stacks, b.stacks, strict=False):
        if mine != theirs:
            mine_heads, their_heads = mine.heads or first.heads, theirs.heads or second.heads
            raise ModelError(f"the models' {mine.name}s differ: A has {mine.layers} layers of {mine_heads} heads, "
                             f"B {theirs.layers} of {their_heads}")  # fmt: skip
    if len(a.stacks) != len(b.stacks):
        raise ModelError(f"the models differ in stacks: A has {len(a.stacks)}, B {len(b.stacks)}")


def agreeing(first: Encoded | AudioInput, second: Encoded | AudioInput, what: str) -> Encoded | AudioInput:
    """``first`` once both sides read the same tokens (hear the same features); else a ModelError saying where
    ``what`` differs."""
    if isinstance(first, AudioInput) or isinstance(second, AudioInput):
        if (
            isinstance(first, AudioInput)
            and isinstance(second, AudioInput)
            and np.array_equal(first.features, second.features)
        ):
            return first
        raise ModelError("the feature extractors differ: A and B do not hear the audio as the same log-mel features")
    if first.tokens == second.tokens and list(first.ids) == list(second.ids):
        return first
    at = next((i for i, pair in enumerate(zip(first.tokens, second.tokens, strict=False)) if pair[0] != pair[1]),
              min(len(first.tokens), len(second.tokens)))  # fmt: skip
    raise ModelError(f"the tokenizers differ: A reads {len(first.tokens)} tokens of the {what}, B "
                     f"{len(second.tokens)}; the first difference is at token {at}")  # fmt: skip


def compare_models(
    a: Model,
    b: Model,
    text: str | np.ndarray,
    *,
    target: str | None = None,
    kind: AttentionKind | None = None,
    on: Placement = NUMPY,
    progress: Callable[[int, int], None] | None = None,
) -> ModelComparison:
    """Run ``text`` (or mono 16 kHz audio samples, which a speech model's encoder hears) through ``a`` and ``b``
    side by side and measure every layer's shift (see the module).

    ``kind`` picks the attention compared (None: the first stack's, an encoder-decoder's encoder); a decoder's
    (causal self or cross) reads ``target`` on both sides, teacher-forced, after each side's encoder read ``text``,
    and its next-token KL is over the target's tokens."""
    from attnx.analysis.effects import kl_divergence
    from attnx.workflows.effects import outputs
    from attnx.workflows.layers import stack_holding

    check_comparable(a, b)
    stack = a.stack if kind is None else stack_holding(a, kind)
    which = 0 if kind is None else stack.attention_of(kind)
    sides = [model.encode(text) if isinstance(text, str) else model.encode_audio(text) for model in (a, b)]
    source = agreeing(sides[0], sides[1], "text")
    memories: list[Memory | None] = [None, None]
    reads = next((attention.keys for attention in stack.attentions if not attention.is_self), None)
    total, done, words = stack.layers, 0, source
    if reads is not None:
        if target is None:
            raise ModelError(f"the {stack.name} reads a target text (what the model writes): give one")
        (encoder,) = (s for s in a.stacks if s.name == reads)
        total += encoder.layers
        passes = [model.run(source, on=on, stack=encoder, layer=encoder.layers - 1) for model in (a, b)]
        for done in range(1, encoder.layers + 1):
            for forward in passes:
                forward.step()
            if progress is not None:
                progress(done, total)
        memories = [Memory(forward.finish(), source.tokens) for forward in passes]
        words = agreeing(a.encode_target(target), b.encode_target(target), "target")
    runs = [model.run(words, on=on, stack=stack, memory=memory, layer=stack.layers - 1)
            for model, memory in ((a, memories[0]), (b, memories[1]))]  # fmt: skip
    layers = []
    for layer in range(stack.layers):
        for at in range(len(stack.attentions)):
            results = [run.step({WEIGHTS} if at == which else ()) for run in runs]
            if at == which:
                shifts = head_shifts(layer, *results)
        per_token, overall = relative_shift(runs[0].stream(), runs[1].stream())
        layers.append(LayerShift(layer, shifts, per_token, overall))
        if progress is not None:
            progress(done + layer + 1, total)
    kl = None
    if stack is a.stacks[-1] and a.architecture.has_lm_head and b.architecture.has_lm_head:
        (_, logp_a), (_, logp_b) = (outputs(run, lm_head=True) for run in runs)
        kl = None if logp_a is None or logp_b is None else kl_divergence(logp_a, logp_b)
    several = len(a.stacks) > 1
    return ModelComparison(a.checkpoint.name, b.checkpoint.name, a.architecture.name, words.tokens, tuple(layers), kl,
                           stack=stack.name if several else None,
                           kind=stack.attentions[which].kind.value if several else None,
                           keys=None if stack.attentions[which].is_self else source.tokens)  # fmt: skip

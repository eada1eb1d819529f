"""A model's layers on a text: one layer's attention, every layer in turn, the model view and rollout.

Each function takes a ``Model`` (``attnx.open_model``; the caller closes it), but ``load_model_spec``, which opens
one; ``progress(done, total)`` is called as the work goes; ``on`` is where the work runs (``Placement``: an engine,
a device and a dtype; the NumPy engine on the CPU by default).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attnx.core.tensors import AVERAGE_WEIGHTS, MASK, SCALED, WEIGHTS, TensorName
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models import Progress, open_model
from attnx.models.stacks import Address, AttentionKind, Memory, Stack
from attnx.models.tokenize import Encoded

CROSS = AttentionKind.CROSS

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.alignment import Alignment
    from attnx.analysis.measures import Rollout
    from attnx.analysis.model_view import ModelView
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.limits import Limits
    from attnx.models import Model
    from attnx.models.audio import AudioInput
    from attnx.models.vision import ImageInput


def layer_spec(
    model: Model,
    text: str | Encoded,
    layer: int,
    *,
    on: Placement = NUMPY,
    heads: int | None = None,
    progress: Progress | None = None,
) -> AttentionSpec:
    """Layer ``layer``'s attention (from 0; -1 is the last) on ``text`` (or its tokens, ``model.encode(text)``) as a
    spec, the layers before it run ``on`` the placement's engine; ``heads`` is the count the caller will split it
    into (checked against the model's caps). In a model of several stacks, the layer of its first (the encoder)."""
    return site_spec(model, text, Address(layer), on=on, heads=heads, progress=progress)


def site_spec(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    address: Address,
    *,
    target: str | Encoded | None = None,
    on: Placement = NUMPY,
    heads: int | None = None,
    progress: Progress | None = None,
) -> AttentionSpec:
    """The attention ``address`` points at (a stack, a layer, an attention kind) as a spec, everything before it run
    ``on`` the placement's engine: a decoder's over the ``target`` text (teacher-forced; or its tokens,
    ``model.encode_target``), after the encoder ran over ``text`` (or its tokens, or the audio it hears) whole;
    another stack's over ``text``. ``progress`` counts the attentions run. A cross-attention's ``special_keys`` are
    the source's (the tokenizer's around ``text``: its end token), its keys."""
    stack, which = address.resolve(model.stacks)
    layer = model.check_layer(address.layer, stack)
    before = layer * len(stack.attentions) + which  # the attentions of the stack that run first
    memory, words, ran = read_by(model, stack, text, target, on, progress, before)
    forward = model.run(words, on=on, heads=heads, layer=layer, stack=stack, memory=memory)
    for done in range(before):
        forward.step()
        if progress is not None:
            progress(ran + done + 1, ran + before)
    spec = forward.spec()
    if stack.attentions[which].kind is CROSS:  # its keys are the source's: so are the special keys (its end token)
        source = model.encode(text) if isinstance(text, str) else text
        special = source.special if isinstance(source, Encoded) else ()  # audio has none
        spec = dataclasses.replace(spec, special_keys=tuple(i for i, flag in enumerate(special) if flag))
    return spec


def layer_results(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    *,
    on: Placement = NUMPY,
    needs: Collection[TensorName] = (WEIGHTS, SCALED, MASK),
    progress: Progress | None = None,
    kind: AttentionKind | None = None,
    target: str | Encoded | None = None,
) -> Iterator[AttentionResult]:
    """Every layer's attention on ``text``, in order, each computed once as the forward pass goes (the sizes of
    every layer are checked against the model's caps before the first runs).

    ``kind`` picks the attention: None or self-attention, the first stack's (the encoder's); a causal
    self-attention or a cross-attention, that of the stack holding it (an encoder-decoder's decoder), which reads
    ``target`` (teacher-forced; or its tokens, ``model.encode_target``) after the encoder ran over ``text`` whole.
    ``progress`` counts the layers run, the encoder's included."""
    stack = model.stack if kind is None else stack_holding(model, kind)
    which = 0 if kind is None else stack.attention_of(kind)
    memory, words, ran = read_by(model, stack, text, target, on, progress, stack.layers)
    forward = model.run(words, on=on, stack=stack, memory=memory, layer=stack.layers - 1)
    for layer in range(stack.layers):
        for at in range(len(stack.attentions)):
            result = forward.step(needs if at == which else ())
            if at == which:
                kept = result
        if progress is not None:
            progress(ran + layer + 1, ran + stack.layers)
        yield kept


def stack_holding(model: Model, kind: AttentionKind) -> Stack:
    """The model's first stack whose layers hold an attention of ``kind``; a ModelError naming what there is."""
    for stack in model.stacks:
        if any(attention.kind is kind for attention in stack.attentions):
            return stack
    kinds = ", ".join(dict.fromkeys(a.kind.label for s in model.stacks for a in s.attentions))
    raise ModelError(f"{model.checkpoint.name}: the model has no {kind.label}; it has {kinds}")


def decoder_input(
    model: Model,
    source: Encoded | AudioInput | ImageInput,
    target: str | None,
    generate: int | None,
    language: str | None,
    on: Placement,
) -> tuple[Encoded | None, range]:
    """What an encoder-decoder's decoder reads: ``target`` teacher-forced, or up to ``generate`` tokens it writes
    itself after its prompt (greedy, reading or hearing ``source``), in ``language`` where the model asks one; and
    the positions it wrote (empty for a target). None where neither is given."""
    if target is not None:
        return model.encode_target(target, language=language), range(0)
    if generate is None:
        return None, range(0)
    from attnx.models.generate import greedy

    found = greedy(model, source, generate, prompt=model.decoder_prompt(language=language), on=on)
    return model.tokenizer.of_ids(found.ids, found.prompt), range(found.prompt, len(found.ids))


def read_by(
    model: Model,
    stack: Stack,
    text: str | Encoded | AudioInput | ImageInput,
    target: str | Encoded | None,
    on: Placement,
    progress: Progress | None,
    after: int,
) -> tuple[Memory | None, str | Encoded | AudioInput | ImageInput, int]:
    """What ``stack`` reads, and the steps run to make it: its own input, ``text``; or, for a decoder, the ``target``
    (its tokens) and the memory of the encoder it attends to, run over ``text`` (its layers are the steps run;
    ``progress``'s total counts ``after`` steps more). A decoder without a target is a ModelError."""
    reads = next((attention.keys for attention in stack.attentions if not attention.is_self), None)
    if reads is None:
        return None, text, 0
    if target is None:
        raise ModelError(f"{model.checkpoint.name}: the {stack.name} reads a target text (what the model writes); "
                         "give one")  # fmt: skip
    (source,) = (s for s in model.stacks if s.name == reads)
    memory = _memory(model, text, source, on, progress, source.layers + after)
    return memory, model.encode_target(target) if isinstance(target, str) else target, source.layers


def _memory(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    stack: Stack,
    on: Placement,
    progress: Progress | None,
    total: int,
) -> Memory:
    """``stack`` (an encoder) run over ``text`` whole: its output, what a cross-attention reads."""
    source = model.run(text, on=on, stack=stack, layer=stack.layers - 1)
    for done in range(stack.layers):
        source.step()
        if progress is not None:
            progress(done + 1, total)
    return Memory(source.finish(), source.tokens)


def load_model_spec(
    path: str | Path,
    text: str,
    layer: int,
    *,
    on: Placement = NUMPY,
    heads: int | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> AttentionSpec:
    """The attention of layer ``layer`` (from 0) of the model in ``path`` on ``text``, as a spec.

    The layers before it run ``on`` its engine and device in its dtype (default: the engine's); only their weights
    and layer ``layer``'s attention weights are read; ``heads`` (default: the model's) is the head count
    the caller will split the layer into, checked against the caps. The spec is the layer's as the model has
    it (``SettingOverrides.apply`` changes its settings). ``limits`` (default:
    ``Limits.from_env()``) are checked before the first layer runs and travel with the spec.
    """
    with open_model(path, on.resolved_dtype(), limits) as model:
        return layer_spec(model, text, layer, on=on, heads=heads, progress=progress)


def layer_attention(model: Model, text: str, layer: int, *, on: Placement = NUMPY) -> AttentionResult:
    """Layer ``layer``'s attention (from 0) on ``text``, computed: its weights, scores, head outputs and output."""
    from attnx.engines import compute

    spec = layer_spec(model, text, layer, on=on)
    return compute(spec, on.engine, dtype=on.dtype, device=on.device, limits=model.limits)


def model_view(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    *,
    on: Placement = NUMPY,
    progress: Progress | None = None,
    kind: AttentionKind | None = None,
    target: str | Encoded | None = None,
    written: Sequence[int] = (),
) -> ModelView:
    """Every layer's heads on ``text`` (or its tokens): their labels and entropy, each layer computed once; the sinks
    are key 0 and the special tokens the tokenizer added, as everywhere.

    ``kind`` picks the attention (as ``layer_results``; None: the first stack's): a decoder's causal self-attention
    reads ``target`` (teacher-forced; or its tokens, ``model.encode_target``; ``written``: the positions of it the
    decoder wrote itself) after the encoder read ``text``; a cross-attention's heads are scored by how they read the
    source (the CROSS rule: monotonicity, coverage, the weight on the source's special tokens, entropy)."""
    from attnx.analysis.model_view import model_view as build
    from attnx.core.measures import CROSS as CROSS_RULE
    from attnx.core.measures import HEADS

    encoded = model.encode(text) if isinstance(text, str) else text
    stack = model.stack if kind is None else stack_holding(model, kind)
    attention = stack.attentions[0 if kind is None else stack.attention_of(kind)]
    words = None
    if any(not a.is_self for a in stack.attentions):  # a decoder: its queries read the target
        if target is None:
            raise ModelError(f"{model.checkpoint.name}: the {stack.name} reads a target text (what the model "
                             "writes); give one")  # fmt: skip
        words = model.encode_target(target) if isinstance(target, str) else target
    if attention.kind is CROSS:  # the keys are the source's: its special tokens (its end token) are the sinks
        sinks: tuple[int, ...] = tuple(i for i, special in enumerate(encoded.special) if special)
    else:
        own = encoded if words is None else words
        sinks = (0, *(i for i, special in enumerate(own.special) if special))
    results = layer_results(model, encoded, on=on, progress=progress, kind=kind, target=words)
    return build(results, model=model.checkpoint.name, architecture=model.architecture.name, sinks=sinks,
                 rule=CROSS_RULE if attention.kind is CROSS else HEADS, stack=stack.name,
                 kind=attention.kind.value, written=written, stacks=len(model.stacks))  # fmt: skip


def rollout(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    *,
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> Rollout:
    """Attention rollout on ``text`` (or its tokens, ``model.encode(text)``) through every layer (Abnar & Zuidema,
    2020), each layer's head average used once."""
    from attnx.analysis.measures import rollout as roll

    results = layer_results(model, text, on=on, needs=(AVERAGE_WEIGHTS,), progress=progress)
    first = next(results)  # a model has a layer
    averages = (result.average_weights for result in itertools.chain([first], results))
    return roll((average for average in averages if average is not None), first.tokens)


def alignment(
    model: Model,
    text: str | Encoded | AudioInput | ImageInput,
    target: str | Encoded,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> Alignment:
    """Which ``text`` token each token of ``target`` looks at most: the decoder's cross-attention weights, every layer
    computed once (teacher-forced on ``target`` after the encoder read ``text``), averaged over ``layers`` and
    ``heads`` (None: all; from 0, -1 the last). A model without a cross-attention is a ModelError."""
    from attnx.analysis.alignment import align

    model.encoder_decoder("alignment needs an encoder-decoder")
    source = model.encode(text) if isinstance(text, str) else text
    words = model.encode_target(target) if isinstance(target, str) else target
    results = layer_results(model, source, on=on, needs=(WEIGHTS,), progress=progress, kind=CROSS, target=words)
    cross = [result.weights for result in results if result.weights is not None]
    return align(cross, source.tokens, words.tokens, layers=layers, heads=heads)

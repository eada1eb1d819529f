"""What a researcher asks of an opened checkpoint: a layer's attention, the model view, rollout, ablations, detection.

Each function takes a ``Model`` (``attnx.open_model``; the caller closes it) and returns the analysis value the
CLI renders, so the same questions run from Python::

    with attnx.open_model("models/minilm") as model:
        view = runs.model_view(model, "The cat sat on the mat")

``progress(done, total)`` is called as the work goes; ``engine`` and ``device`` are ``attnx.compute``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attnx.core.tensors import AVERAGE_WEIGHTS, MASK, SCALED, WEIGHTS, TensorName
from attnx.errors import ChoiceError, ModelError, UsageError
from attnx.models import Progress, open_model

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.detect import Detection, TextRecord
    from attnx.analysis.effects import Ablations, Head
    from attnx.analysis.measures import Rollout
    from attnx.analysis.model_view import ModelView
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.limits import Limits
    from attnx.models import Model
    from attnx.models.tokenize import Encoded


def layer_spec(
    model: Model,
    text: str | Encoded,
    layer: int,
    *,
    engine: str = "numpy",
    device: str = "auto",
    heads: int | None = None,
    progress: Progress | None = None,
) -> AttentionSpec:
    """Layer ``layer``'s attention (from 0; -1 is the last) on ``text`` (or its tokens, ``model.encode(text)``) as a
    spec, the layers before it run on ``engine``; ``heads`` is the count the caller will split it into (checked
    against the model's caps)."""
    layer = model.check_layer(layer)
    forward = model.run(text, engine=engine, device=device, heads=heads, layer=layer)
    for done in range(layer):
        forward.step()
        if progress is not None:
            progress(done + 1, layer)
    return forward.spec()


def layer_results(
    model: Model,
    text: str | Encoded,
    *,
    engine: str = "numpy",
    device: str = "auto",
    needs: Collection[TensorName] = (WEIGHTS, SCALED, MASK),
    progress: Progress | None = None,
) -> Iterator[AttentionResult]:
    """Every layer's attention on ``text``, in order, each computed once as the forward pass goes
    (the sizes of every layer are checked against the model's caps before the first runs)."""
    forward = model.run(text, engine=engine, device=device, layer=model.layers - 1)
    for layer in range(model.layers):
        result = forward.step(needs)
        if progress is not None:
            progress(layer + 1, model.layers)
        yield result


def load_model_spec(
    path: str | Path,
    text: str,
    layer: int,
    *,
    engine: str = "numpy",
    dtype: str | None = None,
    device: str = "auto",
    heads: int | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> AttentionSpec:
    """The attention of layer ``layer`` (from 0) of the model in ``path`` on ``text``, as a spec.

    The layers before it run on ``engine`` in ``dtype`` (default: the engine's); only their weights
    and layer ``layer``'s attention weights are read; ``heads`` (default: the model's) is the head count
    the caller will split the layer into, checked against the caps. The spec is the layer's as the model has
    it (``SettingOverrides.apply`` changes its settings). ``limits`` (default:
    ``Limits.from_env()``) are checked before the first layer runs and travel with the spec.
    """
    from attnx.engines import resolve_dtype

    with open_model(path, resolve_dtype(engine, device, dtype), limits) as model:
        return layer_spec(model, text, layer, engine=engine, device=device, heads=heads, progress=progress)


def layer_attention(
    model: Model, text: str, layer: int, *, engine: str = "numpy", device: str = "auto"
) -> AttentionResult:
    """Layer ``layer``'s attention (from 0) on ``text``, computed: its weights, scores, head outputs and output."""
    from attnx.engines import compute

    return compute(layer_spec(model, text, layer, engine=engine, device=device), engine, device=device,
                   limits=model.limits)  # fmt: skip


def model_view(
    model: Model, text: str, *, engine: str = "numpy", device: str = "auto", progress: Progress | None = None
) -> ModelView:
    """Every layer's heads on ``text``: their labels and entropy, each layer computed once; the sinks are key 0
    and the special tokens the tokenizer added, as everywhere."""
    from attnx.analysis.model_view import model_view as build

    encoded = model.encode(text)
    sinks = (0, *(i for i, special in enumerate(encoded.special) if special))
    results = layer_results(model, encoded, engine=engine, device=device, progress=progress)
    return build(results, model=model.checkpoint.name, architecture=model.architecture.name, sinks=sinks)


def rollout(
    model: Model, text: str | Encoded, *, engine: str = "numpy", device: str = "auto", progress: Progress | None = None
) -> Rollout:
    """Attention rollout on ``text`` (or its tokens, ``model.encode(text)``) through every layer (Abnar & Zuidema,
    2020), each layer's head average used once."""
    from attnx.analysis.measures import rollout as roll

    results = layer_results(model, text, engine=engine, device=device, needs=(AVERAGE_WEIGHTS,), progress=progress)
    first = next(results)  # a model has a layer
    averages = (result.average_weights for result in itertools.chain([first], results))
    return roll((average for average in averages if average is not None), first.tokens)


def check_heads(model: Model, heads: Iterable[Head]) -> tuple[Head, ...]:
    """``heads`` as (layer, head) pairs from 0 (-1 the last layer or head), each once, in the order given; one the
    model lacks is a ChoiceError."""
    from attnx.core.counting import from_end, span

    layers, per_layer = model.layers, model.architecture.heads
    found: list[Head] = []
    for layer, head in heads:
        at_layer, at_head = from_end(layer, layers), from_end(head, per_layer)
        if at_layer is None or at_head is None:
            raise ChoiceError(f"L{layer}H{head} does not exist: the model has layers {span(layers)} and heads "
                              f"{span(per_layer)}")  # fmt: skip
        if (at_layer, at_head) not in found:
            found.append((at_layer, at_head))
    return tuple(found)


def ablate(
    model: Model,
    text: str,
    heads: Iterable[Head] | None = None,
    *,
    layer: int | None = None,
    engine: str = "numpy",
    device: str = "auto",
    progress: Progress | None = None,
) -> Ablations:
    """The effect on the model's outputs for ``text`` of dropping ``heads`` together, or, without them, of
    each head alone (of ``layer`` only, when given)."""
    from attnx.analysis.effects import ablations

    if heads is not None and layer is not None:
        raise UsageError("name the heads to drop together, or a layer whose heads drop one by one, not both")
    sets = [check_heads(model, heads)] if heads is not None else None
    if layer is not None:
        layer = model.check_layer(layer)
    encoded = model.encode(text)
    return ablations(model, encoded, sets, layers=None if layer is None else [layer], engine=engine, device=device,
                     progress=progress)  # fmt: skip


def repeated_sequences(model: Model, *, samples: int, length: int, seed: int) -> Iterator[Encoded]:
    """``samples`` sequences of ``length`` random tokens, each repeated once (seeded by ``seed``)."""
    import numpy as np

    arch, rng = model.architecture, np.random.default_rng(seed)
    for _ in range(samples):
        encoded = model.tokenizer.repeated(length, vocab_size=arch.vocab_size, rng=rng)
        if len(encoded.ids) > arch.max_length:
            raise ChoiceError(f"{length} tokens repeated, with special tokens, are {len(encoded.ids)} tokens; the "
                              f"model reads at most {arch.max_length}")  # fmt: skip
        yield encoded


def encoded_texts(model: Model, texts: Sequence[str], source: str) -> Iterator[Encoded]:
    """Each of ``texts`` tokenized; one the tokenizer refuses names its place in ``source``."""
    for index, text in enumerate(texts):
        try:
            yield model.encode(text)
        except ModelError as exc:
            raise ModelError(f"{source}, text {index} (from 0): {exc}") from None


def detect(
    model: Model,
    texts: Sequence[str] | None = None,
    *,
    samples: int = 8,
    length: int = 24,
    seed: int = 0,
    source: str = "the texts",
    engine: str = "numpy",
    device: str = "auto",
    progress: Progress | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Head detection over ``texts`` (named ``source`` in the result) or, without them, over ``samples`` random
    sequences of ``length`` tokens repeated (seeded by ``seed``); with each sequence's own record."""
    from attnx.analysis.detect import detect_heads

    if texts is not None:
        sequences = encoded_texts(model, texts, source)
    else:
        sequences = repeated_sequences(model, samples=samples, length=length, seed=seed)
        source = f"random sequences of {length} tokens, each repeated"
    return detect_heads(model, sequences, source=source, engine=engine, device=device, progress=progress)

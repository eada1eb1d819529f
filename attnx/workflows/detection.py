"""Head detection on a model: its sequences (texts, or random tokens repeated) run through every layer in lockstep.

``detect`` makes the sequences and calls ``detect_heads``, which runs them and scores each layer as it goes;
``detect_decoder`` scores an encoder-decoder's decoder over texts and their targets; the values they return
(``Detection``, ``TextRecord``) and the scores live in ``attnx.analysis.detect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from attnx.analysis.detect import Detection, Detector, TextRecord
from attnx.core.tensors import MASK, WEIGHTS
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ChoiceError, ModelError
from attnx.models import Model, Progress
from attnx.models.audio import AudioInput
from attnx.models.stacks import AttentionKind, InputKind
from attnx.models.tokenize import Encoded
from attnx.models.vision import ImageInput


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
    on: Placement = NUMPY,
    progress: Progress | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Head detection over ``texts`` (named ``source`` in the result) or, without them, over ``samples`` random
    sequences of ``length`` tokens repeated (seeded by ``seed``); with each sequence's own record."""
    reads_text(model)
    if texts is not None:
        sequences = encoded_texts(model, texts, source)
    else:
        sequences = repeated_sequences(model, samples=samples, length=length, seed=seed)
        source = f"random sequences of {length} tokens, each repeated"
    return detect_heads(model, sequences, source=source, on=on, progress=progress)


def reads_text(model: Model) -> None:
    """A ModelError where the model's first stack does not read text (a speech model's encoder hears audio): detection
    runs texts and token sequences."""
    first = model.stacks[0]
    if first.reads is not InputKind.TEXT:
        raise ModelError(f"{model.checkpoint.name}: its {first.name} hears {first.reads.value}, and detection runs "
                         "texts and token sequences; show its heads on a recording with heads --layer all --audio "
                         "FILE")  # fmt: skip


def detect_heads(
    model: Model,
    sequences: Iterable[Encoded],
    *,
    source: str,
    on: Placement = NUMPY,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Every layer's heads of ``model`` over ``sequences``, each run once through every layer; with each sequence's
    own record. Sinks: key 0 and each sequence's special tokens.

    The sequences run in lockstep (``attnx.models.lockstep``), as many at once as keep their streams stacked
    within the element cap: each layer's weights are read once for all of them. Every sequence is taken (a text
    tokenized) before the first layer runs; ``progress`` counts the layers run, batch after batch, as each is done."""
    from attnx.models.lockstep import Lockstep, batches

    detector, records = Detector(), list[TextRecord]()
    budget = model.limits.rows_per_chunk(model.architecture.d_model)
    plan = list(batches(sequences, lambda encoded: len(encoded.ids), budget))
    total = len(plan) * model.layers
    for number, batch in enumerate(plan):
        passes = [model.run(encoded, on=on, layer=model.layers - 1) for encoded in batch]
        ids = [[int(i) for i in encoded.ids] for encoded in batch]
        own: list[list[list[dict[str, float | None]]]] = [[] for _ in batch]
        with Lockstep(model, passes) as together:
            for layer in range(model.layers):
                for mine, forward, result, tokens in zip(own, passes, together.step((WEIGHTS, MASK)), ids, strict=True):
                    mine.append(detector.add(layer, result, tokens, (0, *forward.special_keys)))
                if progress is not None:
                    progress(number * model.layers + layer + 1, total)
        first = len(records)
        records += [
            TextRecord(first + i, encoded.tokens, mine)
            for i, (encoded, mine) in enumerate(zip(batch, own, strict=True))
        ]
    found = detector.done(
        model=model.checkpoint.name,
        architecture=model.architecture.name,
        source=source,
        stack=model.stack.name,
        kind=model.stack.attentions[0].kind.value,
        stacks=len(model.stacks),
    )
    return found, records


def decoder_targets(
    model: Model,
    sources: Sequence[Encoded | AudioInput | ImageInput],
    targets: Sequence[str | None] | None,
    *,
    generate: int | None = None,
    language: str | None = None,
    source: str = "the texts",
    on: Placement = NUMPY,
) -> Iterator[Encoded]:
    """What the decoder reads after each of ``sources``: its target (teacher-forced) or, with ``generate``, up to
    that many tokens it writes itself greedily (transformers' ``generate(do_sample=False, num_beams=1)``), in
    ``language`` where the model asks one. A text without a target (and no ``generate``) is a ModelError naming its
    place in ``source``."""
    from attnx.workflows.layers import decoder_input

    for index, encoded in enumerate(sources):
        if generate is not None:
            written, _ = decoder_input(model, encoded, None, generate, language, on)
            if written is not None:
                yield written
            continue
        target = None if targets is None else targets[index]
        if target is None:
            raise ModelError(f'{source}, text {index} (from 0): no target for the decoder to read: give each line a '
                             '"target" beside its "text" (JSON Lines), or --generate N')  # fmt: skip
        try:
            yield model.encode_target(target, language=language)
        except ModelError as exc:
            raise ModelError(f"{source}, text {index} (from 0), its target: {exc}") from None


def detect_decoder(
    model: Model,
    texts: Sequence[str],
    targets: Sequence[str | None] | None = None,
    *,
    kind: AttentionKind,
    generate: int | None = None,
    source: str = "the texts",
    on: Placement = NUMPY,
    progress: Progress | None = None,
    heard: AudioInput | ImageInput | None = None,
    language: str | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Head detection on an encoder-decoder's decoder: its attention of ``kind`` over each text's target (teacher-
    forced; or, with ``generate``, what it writes itself), after the encoder read the text. A speech model's encoder
    hears ``heard`` instead, once for every target (``texts`` then go unread), the decoder writing in ``language``.
    A cross-attention is scored by the CROSS rule (monotonicity, coverage, the weight on the source's special tokens,
    entropy, max weight; the source's special tokens are its sinks); a causal self-attention by `detect`'s own
    detectors over the target (its sinks: key 0 and the target's special tokens). Each record holds the decoder's
    tokens.

    The texts run one after the other, each through the encoder and then every decoder layer;
    ``progress`` counts the layers run, text after text."""
    if heard is None:
        reads_text(model)
    from attnx.core.measures import CROSS as CROSS_RULE
    from attnx.core.measures import DETECT
    from attnx.workflows.layers import layer_results, stack_holding

    stack = stack_holding(model, kind)
    encoder = next(s for s in model.stacks if s is not stack)
    cross = kind is AttentionKind.CROSS
    sources: list[Encoded | AudioInput | ImageInput] = (
        list(encoded_texts(model, texts, source)) if heard is None else [heard] * len(targets or [None])
    )
    words = list(decoder_targets(model, sources, targets, generate=generate, language=language, source=source,
                                 on=on))  # fmt: skip
    detector, records = Detector(CROSS_RULE if cross else DETECT), list[TextRecord]()
    per_text = encoder.layers + stack.layers
    for index, (encoded, target) in enumerate(zip(sources, words, strict=True)):
        own: list[list[dict[str, float | None]]] = []
        if cross:  # the keys are the source's: its special tokens (its end token) are the sinks
            sinks: tuple[int, ...] = tuple(i for i, special in enumerate(encoded.special) if special)
        else:
            sinks = (0, *(i for i, special in enumerate(target.special) if special))

        def step(done: int, _total: int, first: int = index * per_text) -> None:
            if progress is not None:
                progress(first + done, len(sources) * per_text)

        results = layer_results(model, encoded, on=on, needs=(WEIGHTS, MASK), progress=step, kind=kind, target=target)
        for layer, result in enumerate(results):
            own.append(detector.add(layer, result, [int(i) for i in target.ids], sinks))
        records.append(TextRecord(index, target.tokens, own))
    found = detector.done(model=model.checkpoint.name, architecture=model.architecture.name, source=source,
                          stack=stack.name, kind=kind.value, stacks=len(model.stacks))  # fmt: skip
    return found, records

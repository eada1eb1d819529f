"""Head detection on a model: its sequences (texts, or random tokens repeated) run through every layer in lockstep.

``detect`` makes the sequences and calls ``detect_heads``, which runs them and scores each layer as it goes; the
values it returns (``Detection``, ``TextRecord``) and the scores live in ``attnx.analysis.detect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from attnx.analysis.detect import Detection, Detector, TextRecord
from attnx.core.tensors import MASK, WEIGHTS
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ChoiceError, ModelError
from attnx.models import Model, Progress
from attnx.models.tokenize import Encoded


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
    if texts is not None:
        sequences = encoded_texts(model, texts, source)
    else:
        sequences = repeated_sequences(model, samples=samples, length=length, seed=seed)
        source = f"random sequences of {length} tokens, each repeated"
    return detect_heads(model, sequences, source=source, on=on, progress=progress)


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
    return detector.done(model=model.checkpoint.name, architecture=model.architecture.name, source=source), records

"""`attnx ablate`: what dropping heads does to a local checkpoint's last hidden state and next-token guesses."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import LanguageOpt, SourceFlags
from attnx.cli.inputs import flag_worded, model_session, refuse, require_checkpoint
from attnx.cli.options import OutputFormat, View
from attnx.cli.viewflags import ReportFlags
from attnx.errors import ChoiceError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.effects import Ablations, TargetAblations
    from attnx.cli.inputs import Session
    from attnx.models import Model
    from attnx.models.stacks import AttentionKind
    from attnx.workflows.target_effects import HeadName

HeadOpt = Annotated[
    list[str] | None,
    typer.Option("--head", metavar="L2H3", help="A head to drop, as L2H3 (layer 2, head 3, both from 0; -1 the "
                 "last) or 2.3; repeat it or separate with commas to drop several together. Of an encoder-decoder, "
                 "WHERE:L1H2, WHERE a stack (enc, dec: the layer's first attention, or --attention's) or an "
                 "attention (self, causal-self, cross): dec:L1H2 and cross:L1H2 are decoder layer 1's "
                 "self- and cross-attention head 2; L2H3 alone is the encoder's. Default: each head alone, in turn."),
]  # fmt: skip


LayerOpt = Annotated[
    str | None,
    typer.Option("--layer", metavar="L", help="Without --head: drop the heads of layer L (from 0, -1 the last) one by "
                 "one, not every layer's; of an encoder-decoder, STACK:L (enc:1, dec:-1)."),
]  # fmt: skip

AttentionOpt = Annotated[
    str | None,
    typer.Option("--attention", metavar="KIND", help="With --target: which attention's heads drop: self (the "
                 "encoder's), causal-self or cross (the decoder's). Default: every attention's, or the layer's first "
                 "with --layer STACK:L."),
]  # fmt: skip

TargetOpt = Annotated[
    str | None,
    typer.Option("--target", metavar="T", help="With --model of an encoder-decoder: the text the decoder reads "
                 "(teacher forcing); the effect is measured on the decoder's next-token log-probabilities."),
]  # fmt: skip

GenerateOpt = Annotated[
    int | None,
    typer.Option("--generate", metavar="N", min=1, help="With --model of an encoder-decoder, in place of --target: "
                 "the decoder writes up to N tokens greedily, then reads them as its target."),
]  # fmt: skip

DEFAULTS = ReportFlags(precision=3, view=View.heatmap)  # a layer × head heatmap of shifts, 3 decimals


@guarded
@grouped
def ablate(
    *,
    checkpoint: SourceFlags,
    head: HeadOpt = None,
    layer: LayerOpt = None,
    attention: AttentionOpt = None,
    target: TargetOpt = None,
    generate: GenerateOpt = None,
    language: LanguageOpt = None,
    report: ReportFlags = DEFAULTS,
) -> None:
    """Drop heads and measure the whole model: its last hidden state and, with an LM head, its next-token guesses.

    A dropped head's output is zeroed before W_o, as transformers' head_mask did.
    Without --head every head (of --layer L only, when given) is dropped alone in turn: a layer × head heatmap.
    Per token: the shift ‖h' − h‖ / ‖h‖, the KL of the next-token distribution (nats) and its top token.
    An encoder-decoder with --target T drops heads of any attention (enc:L0H1, dec:L1H2, cross:L1H2).
    Then it measures the decoder: per target position also the log-probability of the next target token.
    A speech model (Whisper) hears --audio FILE.wav in place of --text (its decoder writing in --language).
    """
    require_checkpoint(checkpoint.model, "attnx ablate")
    from attnx import workflows

    if head and layer is not None:
        raise UsageError("--layer picks the heads to drop one by one; --head names them: give one or the other")
    if target is not None and generate is not None:
        raise UsageError("--generate writes the target the decoder reads; --target gives it: give one or the other")
    names = parse_head_names(head) if head else None
    where, at, kind = parse_where(layer, attention)
    session = model_session(None, checkpoint, backend=report, caps=report, task="ablating", quiet=report.quiet)
    found: Ablations | TargetAblations
    pointed = " ".join(f"{flag} {value}" for flag, value in (("--layer", layer), ("--attention", attention)) if value)
    with session as run:
        part = 0  # the first stack's first attention, unless pointed elsewhere
        if where is not None or kind is not None:
            with flag_worded(f"{pointed}: {{}}"):
                part = pointed_part(run.model, where, kind)
        with flag_worded("--head {}"):
            if target is None and generate is None:
                dropped = first_stack(run.model, names, kind, part)
                refuse({"--language": language}, "is the language a decoder writes in: it goes with --target")
                found = workflows.ablate(run.model, run.source(), dropped, layer=at, on=run.on,
                                         progress=run.progress)  # fmt: skip
            else:
                found = decoder_ablation(run, names, where, at, kind, target, generate, language)
    from attnx.analysis.effects import TargetAblations
    from attnx.render import effects as render
    from attnx.render.serialize import dumps

    if isinstance(found, TargetAblations):
        view = found
        report.show(
            {OutputFormat.json: lambda: dumps(render.target_to_dict(view))},
            lambda colour: render.target_view(view, report.precision, colour=colour, max_rows=report.max_rows),
        )
        return
    ablated = found
    report.show(
        {OutputFormat.json: lambda: dumps(render.ablations_to_dict(ablated))},
        lambda colour: render.ablations_view(ablated, report.precision, colour=colour, max_rows=report.max_rows),
    )


def parse_where(layer: str | None, attention: str | None) -> tuple[str | None, int | None, AttentionKind | None]:
    """``--layer`` (``3``, ``dec:1``) and ``--attention`` as the stack named (None: unsaid), the layer and the kind."""
    from attnx.cli.inputs import parse_one_layer
    from attnx.models.stacks import Address

    with flag_worded("--attention: {}"):
        kind = None if attention is None else Address.parse("0", attention).kind
    if layer is None:
        return None, None, kind
    if ":" not in layer:
        return None, parse_one_layer(layer), kind
    with flag_worded("--layer: {}"):
        address = Address.parse(layer)
    return address.stack, address.layer, kind


def pointed_part(model: Model, where: str | None, kind: AttentionKind | None) -> int:
    """The attention (``parts_of``'s index) that --layer STACK:L and --attention point at."""
    from attnx.workflows.target_effects import find_part

    return find_part(model, where, kind)


def first_stack(
    model: Model, names: list[HeadName] | None, kind: AttentionKind | None, pointed: int
) -> list[tuple[int, int]] | None:
    """Without a target: the heads of the model's first stack (an encoder-decoder's encoder) as (layer, head); a head,
    or --layer and --attention (``pointed``), naming another attention is a usage error that says what to give."""
    from attnx.workflows.target_effects import find_part, parts_of

    parts = parts_of(model)
    found = [pointed]
    for name in names or ():
        try:
            found.append(find_part(model, name.where, kind))
        except ChoiceError as exc:
            raise ChoiceError(f"{name}: {exc}") from None
    elsewhere = next((p for p in found if p != 0), None)
    if elsewhere is not None:
        raise UsageError(f"the {parts[elsewhere].title} reads a target text: give --target T (or --generate N)")
    return None if names is None else [(name.layer, name.head) for name in names]


def decoder_ablation(
    run: Session,
    names: list[HeadName] | None,
    where: str | None,
    layer: int | None,
    kind: AttentionKind | None,
    target: str | None,
    generate: int | None,
    language: str | None,
) -> TargetAblations:
    """An encoder-decoder's ablation measured on its decoder reading ``target`` (or what it writes, ``generate``), in
    ``language`` where the model asks one (a multilingual Whisper)."""
    from attnx.workflows.target_effects import ablate_target, following

    model = run.model
    model.encoder_decoder("--target and --generate are for an encoder-decoder's decoder")
    source = run.source()  # the text's tokens, or the audio a speech model hears
    if generate is None:
        read = target or "" if language is None else model.encode_target(target or "", language=language)
        return ablate_target(model, source, read, names, layer=layer, stack=where, kind=kind, on=run.on,
                             progress=run.progress)  # fmt: skip
    from attnx.workflows.layers import decoder_input

    run.progress.description = "writing"
    words, written = decoder_input(model, source, None, generate, language, run.on)
    if words is None:  # pragma: no cover - --generate is given here
        raise UsageError("give --target T or --generate N")
    run.progress.description = "ablating"
    return ablate_target(model, source, words, names, layer=layer, stack=where, kind=kind,
                         next_ids=following(words.ids), written=tuple(written), on=run.on,
                         progress=run.progress)  # fmt: skip


def parse_heads(values: Iterable[str]) -> list[tuple[int, int]]:
    """``--head`` values (``L2H3``, ``2.3`` or ``2:3``; several comma-separated) as (layer, head) pairs."""
    names = parse_head_names(values)
    where = next((name for name in names if name.where is not None), None)
    if where is not None:
        raise UsageError(f"--head {where}: a stack or an attention is named in an encoder-decoder's heads only")
    return [(name.layer, name.head) for name in names]


def parse_head_names(values: Iterable[str]) -> list[HeadName]:
    """``--head`` values (``L2H3``, ``2.3``, ``2:3``, ``dec:L1H2``, ``cross:1.2``; several comma-separated) as head
    names: where (a stack or an attention, or None), layer and head."""
    from attnx.workflows.target_effects import HeadName

    found: list[HeadName] = []
    for value in values:
        for part in value.split(","):
            match = re.fullmatch(r"\s*(?:([A-Za-z][A-Za-z_-]*)\s*:)?\s*(?:[Ll]\s*(-?\d+)\s*[Hh]\s*(-?\d+)|"
                                 r"(-?\d+)\s*[.:]\s*(-?\d+))\s*", part)  # fmt: skip
            if match is None:
                raise UsageError(
                    f"--head takes a layer and a head counted from 0 (-1 the last), as L2H3 (or 2.3), of an "
                    f"encoder-decoder WHERE:L2H3 (enc, dec, cross), not {part!r}"
                )
            found.append(HeadName(match[1], int(match[2] or match[4]), int(match[3] or match[5])))
    return found

"""Greedy decoding of an encoder-decoder, as transformers' ``generate(do_sample=False, num_beams=1)`` writes it.

The encoder runs once. Each new token then enters the decoder alone: at every attention of every layer, the keys and
values of the positions before are kept (the KV cache: a self-attention's grow by the new row's, a cross-attention's
are projected from the encoder's output once), only the new row's query is projected and computed, and the rest of
the layer runs on the new row alone. No earlier position is run through a layer, or projected, again.

The generation config's logits processors are applied where attnx knows them
(``forced_eos_token_id``; ``suppress_tokens``, never written; ``begin_suppress_tokens``, not written first, as
transformers' ``SuppressTokensLogitsProcessor`` and ``SuppressTokensAtBeginLogitsProcessor`` do) and refused, by name,
where it does not: greedy tokens are transformers' or none. A model whose prompt its generation config says (Whisper)
reads ``forced_decoder_ids`` as that prompt (``Model.decoder_prompt``), as Whisper's ``generate`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnx.core.inputs import DirectInputs, Linear, ProjectedInputs
from attnx.core.tensors import PROJECTED
from attnx.engines.arrays import host
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models.stacks import Memory, Site, Stack
from attnx.models.tokenize import Encoded

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec
    from attnx.models import Model
    from attnx.models.audio import AudioInput
    from attnx.models.vision import ImageInput

GENERATION = "generation_config.json"
# Keys of a generation config that change greedy tokens, each with the value that changes nothing.
NEUTRAL: dict[str, Any] = {
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0), "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0), "bad_words_ids": (None, []), "forced_bos_token_id": (None,),
    "min_length": (None, 0), "min_new_tokens": (None, 0), "sequence_bias": (None, {}),
    "exponential_decay_length_penalty": (None,), "forced_decoder_ids": (None, []), "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False),
}  # fmt: skip


@dataclass(frozen=True)
class Generated:
    """What greedy decoding wrote: the decoder's tokens (``ids``: its ``prompt`` first, then each token written) and
    whether it stopped at an end token (``ended``) rather than after the steps asked for."""

    ids: tuple[int, ...]
    prompt: int
    ended: bool

    @property
    def written(self) -> tuple[int, ...]:
        """The tokens written, after the prompt."""
        return self.ids[self.prompt :]


@dataclass(frozen=True)
class Rules:
    """What a generation config says greedy decoding must do: stop after one of the ``ends``, write ``forced`` last
    (None: nothing forced), never write ``suppressed``, and not write ``first_suppressed`` first."""

    ends: frozenset[int]
    forced: int | None
    suppressed: tuple[int, ...] = ()
    first_suppressed: tuple[int, ...] = ()

    def choose(self, logits: np.ndarray, *, first: bool, last: bool) -> int:
        """The token written after ``logits`` ``[vocab]``: the largest once the rules have had their say."""
        if self.forced is not None and last:
            return self.forced
        hidden = [*self.suppressed, *(self.first_suppressed if first else ())]
        if hidden:
            logits = logits.copy()
            logits[[token for token in hidden if 0 <= token < len(logits)]] = -np.inf
        return int(np.argmax(logits))


def settings(model: Model) -> Rules:
    """The rules of the model's generation config (its config.json where the folder has none); a setting that changes
    greedy tokens and that attnx does not apply is a ModelError naming it."""
    ckpt = model.checkpoint
    found = ckpt.optional_json(GENERATION)
    config = found if found is not None else ckpt.config
    where = GENERATION if found is not None else ckpt.config_name
    prompted = ("forced_decoder_ids",) if model.architecture.prompted else ()  # read as the prompt
    for key, neutral in NEUTRAL.items():
        if key in config and config[key] not in neutral and key not in prompted:
            raise ModelError(f"{ckpt.name}: {where} sets {key} = {config[key]!r:.60}, which attnx's greedy decoding "
                             "does not apply: it would write other tokens than transformers'")  # fmt: skip
    eos = config.get("eos_token_id", ckpt.config.get("eos_token_id"))
    ends = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(isinstance(end, int) and not isinstance(end, bool) for end in ends):
        raise ModelError(f"{ckpt.name}: {where}'s eos_token_id must be a token id or a list of them, got {eos!r:.60}")
    forced = config.get("forced_eos_token_id")
    if forced is not None and (isinstance(forced, bool) or not isinstance(forced, int)):
        raise ModelError(f"{ckpt.name}: {where}'s forced_eos_token_id must be a token id, got {forced!r:.60}")
    suppressed, first = (token_ids(config.get(key), key, f"{ckpt.name}: {where}")
                         for key in ("suppress_tokens", "begin_suppress_tokens"))  # fmt: skip
    return Rules(frozenset(ends), forced, suppressed, first)


def token_ids(value: object, key: str, where: str) -> tuple[int, ...]:
    """A generation config's list of token ids (None: none); anything else is a ModelError naming ``key``."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ModelError(f"{where}'s {key} must be a list of token ids, got {value!r:.60}")
    return tuple(value)


def greedy(
    model: Model,
    source: str | Encoded | AudioInput | ImageInput,
    steps: int,
    *,
    prompt: Sequence[int],
    on: Placement = NUMPY,
) -> Generated:
    """Up to ``steps`` tokens written after ``prompt`` (the decoder's start token, or Whisper's prompt), each the
    largest logit given the source and the tokens before it, stopping after an end token."""
    rules = settings(model)
    encoder, decoder = model.encoder_decoder("greedy decoding here is for encoder-decoders")
    with model.checkpoint.kept():  # every layer's weights read once, not once a token
        return written(model, source, steps, prompt, on, rules, encoder, decoder)


def written(
    model: Model,
    source: str | Encoded | AudioInput | ImageInput,
    steps: int,
    prompt: Sequence[int],
    on: Placement,
    rules: Rules,
    encoder: Stack,
    decoder: Stack,
) -> Generated:
    """``greedy``'s loop, its weights kept."""
    arch = model.architecture
    source_pass = model.run(source, on=on, stack=encoder, layer=encoder.layers - 1)
    memory = Memory(source_pass.finish(), source_pass.tokens)
    sites = [Site(decoder, layer, which, memory) for layer in range(decoder.layers)
             for which in range(len(decoder.attentions))]  # fmt: skip
    entering: list[np.ndarray | None] = [None] * len(sites)  # the rows that entered each attention so far
    cached = [KeysValues() for _ in sites]
    ids, longest = list(prompt), len(prompt) + steps
    model.check_sizes(longest, layer=decoder.layers - 1)
    source_name = model.source(0)
    placed = on.using(arch.working)
    for at in range(longest - 1):
        so_far = np.asarray(ids[: at + 1], dtype=np.intp)
        labels = tuple(str(int(i)) for i in so_far)
        row = arch.stack_embed(decoder, Encoded(so_far, np.zeros_like(so_far), labels))[-1:]  # (1, d_model)
        for index, site in enumerate(sites):
            before = entering[index]
            rows = row if before is None else np.concatenate([before, row])  # (at + 1, d_model)
            entering[index] = rows
            spec = cached[index].spec(arch.site_spec(site, rows, labels, source_name), at)
            projected = placed.compute(spec, needs=(PROJECTED,)).tensor(PROJECTED)  # (1, d_model)
            row = host(arch.site_after(site, row, projected))
        if at + 1 < len(ids):  # still reading the prompt
            continue
        logits = arch.logits(arch.stack_final(decoder, row))[0]
        token = rules.choose(logits, first=len(ids) == len(prompt), last=at + 2 == longest)
        ids.append(token)
        if token in rules.ends:
            return Generated(tuple(ids), len(prompt), True)
    return Generated(tuple(ids), len(prompt), False)


@dataclass
class KeysValues:
    """One attention's keys and values of the positions so far, ``[position, kv width]`` each: the KV cache."""

    k: np.ndarray | None = None
    v: np.ndarray | None = None

    def spec(self, spec: AttentionSpec, at: int) -> AttentionSpec:
        """``spec`` (over every row so far, as the family builds it: its masks, score bias and labels) for query ``at``
        alone, over the keys and values kept: only row ``at``'s query, and a self-attention's new key and value, are
        projected; a cross-attention's keys and values are projected once, at its first step. Inputs attnx does not
        cache (QK-norm, rotary positions, Q/K/V given) are computed whole, for the one query."""
        inputs, one = spec.inputs, spec.select_queries([at])
        if not isinstance(inputs, ProjectedInputs) or inputs.q_norm or inputs.k_norm or spec.settings.rotary:
            return one
        x = inputs.x[at : at + 1]  # (1, d_model)
        if inputs.x_kv is None:  # self-attention: the new position's key and value join the kept ones
            k, v = linear(x, inputs.w_k), linear(x, inputs.w_v)
            self.k = k if self.k is None else np.concatenate([self.k, k])  # (at + 1, kv width)
            self.v = v if self.v is None else np.concatenate([self.v, v])
        elif self.k is None or self.v is None:  # cross-attention: the encoder's output, projected once
            self.k, self.v = linear(inputs.x_kv, inputs.w_k), linear(inputs.x_kv, inputs.w_v)  # (source, kv width)
        return dataclasses.replace(one, inputs=DirectInputs.of(linear(x, inputs.w_q), self.k, self.v, spec.source))


def linear(x: np.ndarray, w: Linear) -> np.ndarray:
    """``x @ W + b``, as the engines compute a projection."""
    out = x @ w.weight
    return out + w.bias if w.bias is not None else out

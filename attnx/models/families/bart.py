"""BART and mBART: encoder-decoders with learned positions (offset 2) and biases everywhere; BART post-LN, mBART pre-LN.

The design, shared with Marian, is ``Seq2Seq`` (attnx/models/seq2seq.py). BART's decoder starts from
``decoder_start_token_id`` (``</s>``, 2); ``forced_bos_token_id`` only steers generation and changes nothing under
teacher forcing. mBART's tokenizer puts ``</s>`` and the source language's code after a text (its tokenizer.json's
post-processor does it; attnx encodes the target with the same one), and under teacher forcing its decoder starts
from the target's last token, the language code, as transformers' ``shift_tokens_right`` does with labels.
"""

from __future__ import annotations

from typing import ClassVar

from attnx.models.seq2seq import Seq2Seq
from attnx.models.tokenize import Encoded


class Bart(Seq2Seq):
    """BART (``BartForConditionalGeneration``, ``BartModel``, ``BartForSequenceClassification``,
    ``BartForQuestionAnswering``, ``BartForCausalLM``): post-LN, an embeddings LayerNorm, no final norms."""

    name = "bart"
    family = "BART"
    design = "post-LN encoder-decoder, learned positions"
    stems = ("Bart",)


class MBart(Seq2Seq):
    """mBART (``MBartForConditionalGeneration`` and the rest): pre-LN, an embeddings LayerNorm and a final LayerNorm
    after each stack (``encoder.layer_norm``, ``decoder.layer_norm``)."""

    name = "mbart"
    family = "mBART"
    design = "pre-LN encoder-decoder, learned positions"
    stems = ("MBart",)
    pre_norm = True
    final_norms = True
    settled: ClassVar[dict[str, object]] = {**Seq2Seq.settled, "normalize_before": True, "add_final_layer_norm": True}

    def start_of(self, target: Encoded) -> int | None:
        """The target's last token (its language code, where the tokenizer adds one), as transformers' mBART shifts
        labels right; None for a decoder alone."""
        return None if self.alone else int(target.ids[-1])


FAMILIES = (Bart, MBart)

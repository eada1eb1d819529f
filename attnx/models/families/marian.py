"""Marian (the opus-mt translation models): BART's post-LN design with sinusoidal positions and scaled embeddings.

The design is ``Seq2Seq`` (attnx/models/seq2seq.py). Marian has no embeddings LayerNorm; positions are sinusoids
(sines in the first half of the width, cosines in the second), which transformers 5 computes rather than stores
(attnx reads the table where an older file holds one, as transformers loads it); the opus-mt configs set
``scale_embedding`` (embeddings times √d_model; absent, transformers 5 reads false) and ``swish`` (SiLU); the decoder
starts from the pad token. Where ``share_encoder_decoder_embeddings`` is false, the encoder and
the decoder read their own tables (``encoder.embed_tokens``, ``decoder.embed_tokens``), the decoder's
``decoder_vocab_size`` rows long. Marian's folders on the Hub ship SentencePiece files (``source.spm``,
``target.spm``, ``vocab.json``) and no tokenizer.json: attnx reads them as ``MarianTokenizer`` does
(attnx/models/spm_tokenizer.py), or a tokenizer.json where the folder has one.
"""

from __future__ import annotations

from typing import ClassVar

from attnx.models.seq2seq import Seq2Seq


class Marian(Seq2Seq):
    """Marian (``MarianMTModel``, ``MarianModel``, ``MarianForCausalLM``)."""

    name = "marian"
    family = "Marian"
    design = "post-LN encoder-decoder, sinusoidal positions"
    stems = ("Marian",)
    embedding_norm = False
    sinusoidal = True
    own_vocabularies = True
    pad_default = None
    settled: ClassVar[dict[str, object]] = {
        **Seq2Seq.settled,
        "normalize_embedding": False,
        "static_position_embeddings": True,
    }

    @classmethod
    def names(cls, class_name: str) -> bool:
        """Marian's classes, ``MarianMTModel`` among them."""
        return class_name == "MarianMTModel" or super().names(class_name)


FAMILIES = (Marian,)

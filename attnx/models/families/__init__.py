"""The model families attnx runs, one module each; a family is registered by one line in ``FAMILIES`` below.

A family is an ``Architecture`` (attnx/models/architecture.py): BERT and GPT-2 are their own designs; the
decoders of the Llama line are ``Decoder`` (attnx/models/decoder.py) with its hooks set, or, where only the
reading of config.json differs, a ``Row`` of a table (families/llama.py). docs/architecture.md says how to add
one and which test it needs.
"""

from __future__ import annotations

from attnx.models.architecture import Architecture
from attnx.models.families import (
    bart,
    bert,
    gemma,
    gemma3,
    gpt2,
    gpt_neox,
    gpt_oss,
    granite,
    llama,
    marian,
    moe,
    olmo2,
    phi3,
    qwen3,
    smollm3,
    t5,
    vit,
    whisper,
)

# Every family, in the order attnx lists them (config.json's model_type is each one's ``name``).
FAMILIES: tuple[type[Architecture], ...] = (
    *bert.FAMILIES,
    *gpt2.FAMILIES,
    *llama.FAMILIES,
    *granite.FAMILIES,
    *qwen3.FAMILIES,
    *smollm3.FAMILIES,
    *gemma.FAMILIES,
    *gemma3.FAMILIES,
    *phi3.FAMILIES,
    *gpt_neox.FAMILIES,
    *olmo2.FAMILIES,
    *moe.FAMILIES,
    *gpt_oss.FAMILIES,
    *t5.FAMILIES,
    *whisper.FAMILIES,
    *bart.FAMILIES,
    *marian.FAMILIES,
    *vit.FAMILIES,
)

"""Granite (``granite``): its four multipliers reach the spec, the residual stream and the logits.

The agreement with transformers layer by layer is ``TestAgreement`` (test_decoders.py) on the variant ``granite``
(embeddings × 3, scores × 0.2, each branch × 0.5, logits ÷ 4, tied embeddings).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnx.models import open_model
from attnx.workflows import load_model_spec
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built, float64_everywhere


@pytest.fixture(scope="module")
def granite(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    return built("granite", tmp_path_factory)


def test_scale_is_the_attention_multiplier(granite: DecoderReference) -> None:
    """The scores are multiplied by attention_multiplier, not 1/√d_k."""
    assert load_model_spec(granite.path, TEXT, 0).multiplier == 0.2


def test_logits(granite: DecoderReference) -> None:
    """The next-token logits (what ablate's KL reads) are transformers' ÷ logits_scaling included (float64)."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(granite.path, attn_implementation="eager",
                                                              dtype=torch.float64)  # fmt: skip
    with float64_everywhere(), torch.no_grad():
        model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
        theirs = model(torch.tensor([granite.ids])).logits[0].numpy()
    with open_model(granite.path) as ours:
        logits = ours.architecture.logits(ours.run(TEXT, layer=ours.layers - 1).finish())
    assert np.abs(logits - theirs).max() <= 1e-10 * max(1.0, float(np.abs(theirs).max()))

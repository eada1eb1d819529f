"""`attnx ablate` on an encoder-decoder with --target or --generate: a head of any attention dropped, the decoder's
next-token log-probabilities in the table and the JSON equal to transformers' with the head zeroed."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from attnx.analysis.effects import log_softmax
from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference
from tests.runner import Outcome, run_attnx
from tests.workflows.test_ablate_seq2seq import reference

pytest.importorskip("torch")
pytest.importorskip("transformers")


def invoke(*args: str, code: int = 0, columns: int = 80) -> Outcome:
    """`attnx ablate ARGS` piped, ``columns`` wide, which must exit with ``code``."""
    result = run_attnx("ablate", *args, env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.code == code, result.stderr
    return result


def on(ref: Seq2SeqReference, *args: str, code: int = 0) -> Outcome:
    """`attnx ablate` of the fixture's model on its source and target."""
    return invoke("--model", str(ref.path), "--text", TEXT, "--target", TARGET, *args, code=code)


class TestJson:
    @pytest.mark.parametrize("name", ["t5", "bart"])
    def test_cross_head_equals_transformers(self, name: str, request: pytest.FixtureRequest) -> None:
        """--head cross:L1H2: per target position, the next token, its log-probability intact and dropped, the change
        and the KL equal transformers' with that cross head zeroed before the output projection (1e-10)."""
        ref: Seq2SeqReference = request.getfixturevalue(name)
        data = json.loads(on(ref, "--head", "cross:L1H2", "-f", "json").stdout)
        (effect,) = data["ablations"]
        assert effect["labels"] == ["cross:L1H2"] and effect["heads"] == [[1, 2]]
        assert effect["sites"] == [{"stack": "decoder", "attention": "cross", "layer": 1, "head": 2}]
        assert data["sweep"] is False and data["lm_head"] is True and data["written"] == []
        assert [a["attention"] for a in data["attentions"]] == ["self", "causal self", "cross"]
        logits, _ = reference(ref, {})
        after, _ = reference(ref, {("cross", 1): (2,)})
        labels = data["next"]
        assert labels[:-1] == ref.decoder_ids[1:] and len(data["tokens"]) == len(ref.decoder_ids)
        rows = np.arange(len(labels))
        p, q = log_softmax(logits), log_softmax(after)
        assert np.abs(np.asarray(data["logp"]) - p[rows, labels]).max() <= 1e-10
        assert np.abs(np.asarray(effect["logp"]) - q[rows, labels]).max() <= 1e-10
        assert np.abs(np.asarray(effect["delta_logp"]) - (q - p)[rows, labels]).max() <= 1e-10
        assert np.abs(np.asarray(effect["kl"]) - (np.exp(p) * (p - q)).sum(axis=1)).max() <= 1e-10
        assert effect["mean_delta_logp"] == pytest.approx(np.mean((q - p)[rows, labels]), abs=1e-12)
        assert data["top"] == logits.argmax(axis=1).tolist() and effect["top_after"] == after.argmax(axis=1).tolist()

    def test_sweep_of_a_layers_cross_heads(self, t5: Seq2SeqReference) -> None:
        """--layer dec:1 --attention cross drops each cross head of decoder layer 1 in turn; each equals the head
        dropped alone with --head."""
        data = json.loads(on(t5, "--layer", "dec:1", "--attention", "cross", "-f", "json").stdout)
        assert data["sweep"] is True
        assert [a["labels"] for a in data["ablations"]] == [["cross:L1H0"], ["cross:L1H1"], ["cross:L1H2"]]
        alone = json.loads(on(t5, "--head", "dec:L1H1", "--attention", "cross", "-f", "json").stdout)
        np.testing.assert_allclose(data["ablations"][1]["kl"], alone["ablations"][0]["kl"], rtol=1e-12)

    def test_encoder_head_on_the_decoder(self, t5: Seq2SeqReference) -> None:
        """An encoder head (L0H1, enc:L0H1 and self:0.1 alike) moves the memory the cross-attention reads: the decoder's
        log-probabilities equal transformers' with it zeroed."""
        outs = [json.loads(on(t5, "--head", head, "-f", "json").stdout) for head in ("L0H1", "enc:L0H1", "self:0.1")]
        assert outs[0]["ablations"][0]["labels"] == ["enc:L0H1"]
        assert outs[0]["ablations"] == outs[1]["ablations"] == outs[2]["ablations"]
        after, _ = reference(t5, {("self", 0): (1,)})
        labels = outs[0]["next"]
        found = np.asarray(outs[0]["ablations"][0]["logp"])
        assert np.abs(found - log_softmax(after)[np.arange(len(labels)), labels]).max() <= 1e-10

    def test_generate(self, t5: Seq2SeqReference) -> None:
        """--generate N: the decoder reads what it wrote; each position's next token is the one written after it, the
        last position has none (null)."""
        data = json.loads(invoke("--model", str(t5.path), "--text", TEXT, "--generate", "3", "--head", "cross:L0H0",
                                 "-f", "json").stdout)  # fmt: skip
        assert data["written"] == [1, 2, 3] and len(data["tokens"]) == 4
        assert data["next"][-1] is None and data["ablations"][0]["logp"][-1] is None
        assert all(value is not None for value in data["ablations"][0]["logp"][:-1])


class TestTable:
    def test_set_shows_each_position(self, t5: Seq2SeqReference) -> None:
        """The table's log-probabilities are the JSON's, rounded; the header names both texts."""
        data = json.loads(on(t5, "--head", "cross:L1H2", "-f", "json").stdout)
        out = on(t5, "--head", "cross:L1H2").stdout
        assert "Dropping cross:L1H2: the decoder, position by position" in out
        assert "\nsource tokens: " in out and "\ntarget tokens: '<pad>'" in out
        (effect,) = data["ablations"]
        for i in range(len(data["tokens"])):
            row = next(line for line in out.splitlines() if re.match(rf"{i}\s", line))
            numbers = [float(x) for x in re.findall(r"-?\d+\.\d{3}", row)]
            expected = [
                data["logp"][i],
                effect["logp"][i],
                effect["delta_logp"][i],
                effect["kl"][i],
                effect["shift"][i],
            ]
            np.testing.assert_allclose(numbers, expected, atol=6e-4)
        assert max(len(line) for line in out.splitlines()) <= 80

    def test_sweep_draws_a_grid_per_attention(self, bart: Seq2SeqReference) -> None:
        """Without --head: a layer × head grid for each of the three attentions, then the largest effects."""
        out = on(bart, "--rows", "all").stdout
        for title in ("encoder self-attention (enc:)", "decoder causal self-attention (dec:)",
                      "decoder cross-attention (cross:)"):  # fmt: skip
            assert title in out
        assert "largest effects:" in out and "Δ log p" in out


class TestRefused:
    def test_decoder_heads_need_a_target(self, t5: Seq2SeqReference) -> None:
        """Without --target, a decoder head or attention is refused, saying what to give; the encoder's work as before."""
        for args in (["--head", "cross:L1H2"], ["--layer", "dec:0"], ["--attention", "causal-self"]):
            out = invoke("--model", str(t5.path), "--text", TEXT, *args, code=2)
            assert "reads a target text: give --target T (or --generate N)" in out.stderr
        data = json.loads(invoke("--model", str(t5.path), "--text", TEXT, "--layer", "enc:1", "-f", "json").stdout)
        assert data["lm_head"] is False and [a["labels"] for a in data["ablations"]] == [["L1H0"], ["L1H1"], ["L1H2"]]

    def test_wrong_names(self, t5: Seq2SeqReference) -> None:
        """A stack or head the model lacks, and --target on a decoder-only model, are one line each, exit 2."""
        assert "--head x:L0H0: the model has no stack 'x'" in on(t5, "--head", "x:L0H0", code=2).stderr
        assert "--head cross:L3H0 does not exist" in on(t5, "--head", "cross:L3H0", code=2).stderr
        assert (
            "--layer enc:0 --attention cross: the encoder's layers hold no cross-attention"
            in on(t5, "--layer", "enc:0", "--attention", "cross", code=2).stderr
        )

    def test_decoder_only(self, gpt2: Reference) -> None:
        """A model without a cross-attention refuses --target."""
        out = invoke("--model", str(gpt2.path), "--text", TEXT, "--target", "a", code=2)
        assert "has no cross-attention" in out.stderr

"""`attnx explore` on an encoder-decoder: k moves between the encoder's self-attention, the decoder's causal
self-attention and the cross-attention, each equal to transformers' weights on the tiny T5."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.explore import Explorer
from attnx.cli.explore import explorer
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags
from attnx.engines import compute
from attnx.errors import UsageError
from attnx.models import open_model
from attnx.models.generate import greedy
from attnx.models.stacks import Address
from attnx.render import explore as panels
from attnx.workflows import site_spec
from attnx.workflows.sites import Sites
from tests.models.checkpoints import TEXT, Reference
from tests.models.encoder_decoders import TARGET, Seq2SeqReference
from tests.models.whisper_checkpoints import TARGET as SPOKEN
from tests.models.whisper_checkpoints import WhisperReference
from tests.tui.screens import NUMBER, printed

pytest.importorskip("textual")
from textual.pilot import Pilot

from attnx.tui.app import ExploreApp
from tests.tui.test_explore import drive, footer, notes, shown

# transformers' name of each kind's weights in the fixture, by the explorer's label of it
REFERENCE = {"encoder self-attention": "encoder", "decoder causal self-attention": "decoder",
             "decoder cross-attention": "cross"}  # fmt: skip
TOLERANCE = 1e-10  # float64, as tests/models/test_t5.py holds every kind


def t5_explorer(t5: Seq2SeqReference, **flags: object) -> Explorer:
    """The explorer's state on the tiny T5 reading TEXT, as the command makes it with ``flags``."""
    checkpoint = ModelFlags(model=str(t5.path), text=TEXT, **flags)  # type: ignore[arg-type]
    return explorer(None, InputFlags(), checkpoint, EngineFlags(), CapFlags())


def labels(t5: Seq2SeqReference, ids: list[int]) -> tuple[str, ...]:
    """The tokens of ``ids`` as the explorer labels them (the model's tokenizer)."""
    with open_model(t5.path) as model:
        return model.tokenizer.of_ids(ids, 0).tokens


def assert_transformers(state: Explorer, t5: Seq2SeqReference) -> None:
    """The weights under the cursor, every head and query, are transformers' of that kind and layer."""
    assert state.current is not None
    expected = t5.attentions["float64"][REFERENCE[state.current.label]][state.layer]
    shown = state.matrix(0, len(state.tokens))
    assert shown.shape == expected.shape
    np.testing.assert_allclose(shown, expected, rtol=0, atol=TOLERANCE)


class TestKinds:
    """The explorer's state, no terminal: k's cycle, the layers within a stack, the tokens on each axis."""

    def test_cycle_through_the_three(self, t5: Seq2SeqReference) -> None:
        state = t5_explorer(t5, target=TARGET)
        try:
            source, target = labels(t5, t5.source_ids), labels(t5, t5.decoder_ids)
            assert [kind.label for kind in state.kinds] == list(REFERENCE)
            assert state.kind == 0 and (state.tokens, state.key_tokens) == (source, source)
            assert_transformers(state, t5)
            assert state.cycle_kind() is None  # the decoder's causal self-attention: target × target
            assert state.current is not None and state.current.label == "decoder causal self-attention"
            assert (state.tokens, state.key_tokens) == (target, target) and state.tokens[0] == "<pad>"
            assert_transformers(state, t5)
            assert state.cycle_kind() is None  # the cross-attention: target queries × source keys
            assert (state.tokens, state.key_tokens) == (target, source)
            for layer in range(3):
                assert state.layer == layer
                assert_transformers(state, t5)
                state.move_layer(1)
            assert (state.layer, state.layers) == (2, 3)  # the decoder's last layer stops the cursor
            assert state.cycle_kind() is None  # wraps around to the encoder, at its own layer
            assert (state.kind, state.layer, state.layers, state.tokens) == (0, 0, 2, source)
            assert state.cycle_kind(-1) is None  # back: the cross-attention, where the cursor left the decoder
            assert (state.kind, state.layer) == (2, 2)
            assert_transformers(state, t5)
        finally:
            state.close()

    def test_each_stack_keeps_its_place(self, t5: Seq2SeqReference) -> None:
        """Between the decoder's two kinds the layer and query stay; the encoder's are where the cursor left them."""
        state = t5_explorer(t5, target=TARGET)
        try:
            state.move_layer(1)
            state.go_to(4)
            state.cycle_kind()
            state.move_layer(2)
            state.go_to(7)
            state.move_head(2)
            state.cycle_kind()  # causal self → cross: the same layer, query and head
            assert (state.kind, state.layer, state.query, state.head) == (2, 2, 7, 2)
            assert_transformers(state, t5)
            state.cycle_kind()
            assert (state.kind, state.layer, state.query) == (0, 1, 4)
            assert_transformers(state, t5)
        finally:
            state.close()

    def test_the_panels_name_each_axis(self, t5: Seq2SeqReference) -> None:
        """The status names the stack, layer and kind; the cross-attention's heatmap has the target's tokens as rows
        and the source's as columns; the trace's keys are the source's."""
        state = t5_explorer(t5, target=TARGET)
        try:
            status = panels.status_line(state).plain
            assert " · encoder layer 0 of 2 · self-attention · head 0 of 3 · query 0 ' the' · weights" in status
            state.cycle_kind()
            state.cycle_kind()
            state.move_layer(1)
            state.go_to(2)
            status = panels.status_line(state).plain
            assert " · decoder layer 1 of 3 · cross-attention · head 0 of 3 · query 2 ' dog' · weights" in status
            lines = printed(panels.head_panel(state, colour=False, width=200, rows=16), width=200)
            header = next(line for line in lines if line.split()[:3] == ["the", "cat", "sat"])
            assert header.split() == [token.strip() for token in state.key_tokens]
            rows = [line for line in lines if line.lstrip("▶ ").startswith(("<pad>", "a ", "dog "))]
            assert [row.lstrip("▶ ").split()[0] for row in rows] == ["<pad>", "a", "dog"]
            expected = t5.attentions["float64"]["cross"][1][0, 2]
            dog = next(row for row in rows if row.startswith("▶"))
            assert NUMBER.findall(dog) == [f"{weight:.2f}" for weight in expected]
            trace = state.trace
            assert (trace.query, trace.token, trace.n_keys) == (2, " dog", len(t5.source_ids))
        finally:
            state.close()

    def test_views(self, t5: Seq2SeqReference) -> None:
        """The rollout is the encoder's: v passes it by in the decoder, and leaves it for the weights there; the
        value shares of the cross-attention weigh the source's tokens."""
        state = t5_explorer(t5, target=TARGET)
        try:
            views = []
            for _ in range(4):
                state.cycle_view()
                views.append(state.view)
            assert views == ["scores", "value", "rollout", "weights"]
            state.cycle_view()
            state.cycle_view()
            state.cycle_view()
            assert state.view == "rollout"
            state.cycle_kind()
            assert state.view == "weights"
            state.cycle_kind()
            views = []
            for _ in range(3):
                state.cycle_view()
                views.append(state.view)
            assert views == ["scores", "value", "weights"]
            state.cycle_view()
            state.cycle_view()
            shares = state.matrix(0, len(state.tokens))
            assert shares.shape == (3, len(t5.decoder_ids), len(t5.source_ids))
            np.testing.assert_allclose(shares.sum(axis=-1), 1.0, atol=1e-12)
        finally:
            state.close()

    def test_where_it_starts(self, t5: Seq2SeqReference) -> None:
        state = t5_explorer(t5, target=TARGET, layer="dec:1", attention="cross")
        try:
            assert state.current is not None and state.current.label == "decoder cross-attention"
            assert state.layer == 1
            assert_transformers(state, t5)
        finally:
            state.close()
        state = t5_explorer(t5, target=TARGET, layer="dec:-1")  # the layer's first: the causal self-attention
        try:
            assert (state.kind, state.layer) == (1, 2)
            assert_transformers(state, t5)
        finally:
            state.close()

    def test_without_a_target(self, t5: Seq2SeqReference) -> None:
        """The encoder alone, as before; k says the decoder needs a target and the cursor stays."""
        state = t5_explorer(t5)
        try:
            why = state.cycle_kind()
            assert why is not None and "--target" in why and "--generate" in why
            assert state.kind == 0 and state.layers == 2
            assert_transformers(state, t5)
        finally:
            state.close()
        with pytest.raises(UsageError, match="--layer dec:1: the decoder reads a target text"):
            t5_explorer(t5, layer="dec:1")

    def test_generate(self, t5: Seq2SeqReference) -> None:
        """--generate 3: the decoder reads what it wrote (greedy), the source's name says which tokens; its weights
        are those `run --layer dec:0 --attention cross` computes on those tokens."""
        with open_model(t5.path) as model:
            source = model.encode(TEXT)
            found = greedy(model, source, 3, prompt=model.decoder_prompt())
            written = model.tokenizer.of_ids(found.ids, found.prompt)
            expected = compute(site_spec(model, source, Address.parse("dec:0", "cross"), target=written)).weights
        state = t5_explorer(t5, generate=3, attention="cross", layer="dec:0")
        try:
            assert state.source.endswith(f"target tokens 1-{len(found.ids) - 1} written by the model")
            assert state.tokens == written.tokens and len(state.key_tokens) == len(t5.source_ids)
            np.testing.assert_array_equal(state.matrix(0, len(state.tokens)), expected)
        finally:
            state.close()

    def test_refused(self, t5: Seq2SeqReference, gpt2: Reference) -> None:
        with pytest.raises(UsageError, match="give one or the other"):
            t5_explorer(t5, target=TARGET, generate=2)
        checkpoint = ModelFlags(model=str(gpt2.path), text=TEXT, target=TARGET)
        with pytest.raises(UsageError, match="--target is for an encoder-decoder's decoder"):
            explorer(None, InputFlags(), checkpoint, EngineFlags(), CapFlags())

    def test_a_decoder_only_model_is_as_before(self, gpt2: Reference) -> None:
        checkpoint = ModelFlags(model=str(gpt2.path), text=TEXT, layer="1")
        state = explorer(None, InputFlags(), checkpoint, EngineFlags(), CapFlags())
        try:
            assert state.kinds == () and state.current is None and (state.layer, state.layers) == (1, 3)
            assert state.cycle_kind() is not None and state.layer == 1
            assert " · layer 1 of 3 · head 0 of 4 · " in panels.status_line(state).plain
        finally:
            state.close()


class TestAudio:
    """Whisper: the encoder hears --audio, the decoder reads --target in --language; k moves between them."""

    def test_a_whisper(self, whisper: WhisperReference) -> None:
        checkpoint = ModelFlags(model=str(whisper.path), audio=str(whisper.wav), target=SPOKEN, language="en",
                                layer="dec:1", attention="cross")  # fmt: skip
        state = explorer(None, InputFlags(), checkpoint, EngineFlags(), CapFlags())
        try:
            assert state.current is not None and state.current.label == "decoder cross-attention"
            expected = whisper.attentions["float64"]["cross"][1]
            assert len(state.tokens) == len(whisper.decoder_ids) and len(state.key_tokens) == expected.shape[-1]
            np.testing.assert_allclose(state.matrix(0, len(state.tokens)), expected, rtol=0, atol=TOLERANCE)
            assert state.cycle_kind() is None and state.current.label == "encoder self-attention"
            assert state.key_tokens[:2] == ("0.00s", "0.02s") and state.layer == 1
            rows = state.matrix(0, 3)  # the first block alone: 3 of 1500 queries
            np.testing.assert_allclose(rows, whisper.attentions["float64"]["encoder"][1][:, :3], rtol=0, atol=TOLERANCE)
            assert state.computed == [(1, 0)]
        finally:
            state.close()
        with pytest.raises(UsageError, match="--text is what a text model reads"):
            explorer(None, InputFlags(), ModelFlags(model=str(whisper.path), audio=str(whisper.wav), text="hi"),
                     EngineFlags(), CapFlags())  # fmt: skip


class TestEncoderRunOnce:
    """The encoder runs once, its output (the decoder's memory) reused by every decoder layer of either kind."""

    def test_each_stack_runs_once(self, t5: Seq2SeqReference) -> None:
        with open_model(t5.path) as model:
            runs: list[str] = []
            original = model.run

            def counted(*args: object, **kwargs: object) -> object:
                runs.append(kwargs["stack"].name)  # type: ignore[union-attr]
                return original(*args, **kwargs)  # type: ignore[arg-type]

            model.run = counted  # type: ignore[method-assign]
            source, target = model.encode(TEXT), model.encode_target(TARGET)
            sites = Sites(model, source, target)
            encoder, decoder = model.stacks
            for layer in (2, 0, 1):
                for which, kind in enumerate(("decoder", "cross")):
                    weights = compute(sites.spec(decoder, which, layer)).weights
                    np.testing.assert_allclose(weights, t5.attentions["float64"][kind][layer], atol=TOLERANCE)
            for layer in (1, 0):
                weights = compute(sites.spec(encoder, 0, layer)).weights
                np.testing.assert_allclose(weights, t5.attentions["float64"]["encoder"][layer], atol=TOLERANCE)
            assert runs == ["encoder", "decoder"]
            model.run = original  # type: ignore[method-assign]
            alone = site_spec(model, source, Address.parse("dec:1", "cross"), target=target)
            np.testing.assert_array_equal(compute(alone).weights, compute(sites.spec(decoder, 1, 1)).weights)


class TestKindKey:
    """The app: k cycles the kinds, the header follows; without a target it says why nothing moved."""

    def test_k_moves_between_the_kinds(self, t5: Seq2SeqReference) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.pause()
            assert " k kind " in footer(app) and footer(app).endswith("q quit")
            assert "encoder layer 0 of 2 · self-attention · head 0 of 3" in shown(app, "status")
            await pilot.press("k")
            assert "decoder layer 0 of 3 · causal self-attention · head 0 of 3 · query 0 '<pad>'" in shown(
                app, "status"
            )
            await pilot.press("k", "right_curly_bracket", "right", "right")
            assert "decoder layer 1 of 3 · cross-attention · head 0 of 3 · query 2 ' dog'" in shown(app, "status")
            assert_transformers(app.state, t5)
            await pilot.pause(3 * app.trace_delay)  # the cursor rests: the trace follows
            assert "Trace of ' dog' (query 2)" in shown(app, "trace")
            assert "Query 2 ' dog' in every head" in shown(app, "heads")
            await pilot.press("c")  # a model's settings: the command that tries it names the kind
            assert notes(app)[-1].endswith(
                '--model DIR --text "…" --layer decoder:1 --attention cross --target "…" --causal'
            )
            await pilot.press("k")
            assert "encoder layer 0 of 2 · self-attention" in shown(app, "status")
            assert app.state.tokens == labels(t5, t5.source_ids)

        drive(t5_explorer(t5, target=TARGET), session)

    def test_k_without_a_target(self, t5: Seq2SeqReference) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("k")
            assert app.state.kind == 0 and "encoder layer 0 of 2 · self-attention" in shown(app, "status")
            assert notes(app) == [
                "the decoder reads a target text: give --target T, or --generate N to let it write one"
            ]

        drive(t5_explorer(t5), session)

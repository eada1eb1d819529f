"""Every attention of a model on a text, layer by layer, each spec made once as its stack's forward pass reaches it.

``Sites`` is what `attnx explore` moves over: a stack's forward pass goes as far as the layer asked for and no
further, its specs kept; a decoder reads the encoder's output (``Memory``), made once, from the encoder's own pass
(the layers already run are not run again), and its target (teacher-forced). ``kinds`` gives an encoder-decoder's
three kinds of attention as the explorer's ``Kind``s.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models.stacks import AttentionKind, Memory, Stack

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.explore import Kind
    from attnx.core.spec import AttentionSpec
    from attnx.models import ForwardPass, Model
    from attnx.models.audio import AudioInput
    from attnx.models.tokenize import Encoded
    from attnx.models.vision import ImageInput


@dataclass
class _Run:
    """A stack's forward pass and the specs it made, in the order it runs them (layer by layer, each layer's
    attentions in turn); ``done``: the last was run, the stack's output made."""

    forward: ForwardPass
    specs: list[AttentionSpec]
    done: bool = False


class Sites:
    """Each attention of ``model``'s stacks as a spec, its stack's pass run ``on`` a placement as far as it needs:
    the first stack (and any stack reading no other) over ``source``, a decoder over ``target`` (the tokens it reads,
    ``model.encode_target``; None: the decoder cannot be reached) after its encoder ran whole. Safe to call from two
    threads (the explorer's rollout is computed beside its app)."""

    def __init__(
        self,
        model: Model,
        source: Encoded | AudioInput | ImageInput,
        target: Encoded | None = None,
        *,
        on: Placement = NUMPY,
    ) -> None:
        self.model, self.source, self.target, self.on = model, source, target, on
        self._runs: dict[str, _Run] = {}
        self._memories: dict[str, Memory] = {}
        self._lock = threading.Lock()

    def spec(self, stack: Stack, which: int, layer: int) -> AttentionSpec:
        """Attention ``which`` (from 0) of layer ``layer`` (from 0) of ``stack``, its pass run up to it once."""
        with self._lock:
            self.model.check_layer(layer, stack)
            run = self._run(stack)
            return self._reach(run, layer * len(stack.attentions) + which)

    def memory(self, name: str) -> Memory:
        """Stack ``name``'s output (an encoder's), what a cross-attention reads: its pass run to the end, once."""
        if name not in self._memories:
            (stack,) = (s for s in self.model.stacks if s.name == name)
            run = self._run(stack)
            self._reach(run, stack.layers * len(stack.attentions) - 1)
            if not run.done:
                run.forward.step(spec=run.specs[-1])
                run.done = True
            self._memories[name] = Memory(run.forward.finish(), run.forward.tokens)
        return self._memories[name]

    def _run(self, stack: Stack) -> _Run:
        """``stack``'s pass, started once: over the target after the stack it reads (a decoder), else the source."""
        if stack.name not in self._runs:
            reads = next((attention.keys for attention in stack.attentions if not attention.is_self), None)
            memory, words = None, self.source
            if reads is not None:
                if self.target is None:
                    raise ModelError(f"{self.model.checkpoint.name}: the {stack.name} reads a target text (what the "
                                     "model writes); give one")  # fmt: skip
                memory, words = self.memory(reads), self.target
            forward = self.model.run(words, on=self.on, stack=stack, memory=memory, layer=stack.layers - 1)
            self._runs[stack.name] = _Run(forward, [forward.spec()])
        return self._runs[stack.name]

    @staticmethod
    def _reach(run: _Run, site: int) -> AttentionSpec:
        """The spec of attention ``site`` of ``run`` (counted in the order the pass runs them), the pass moved on
        from the last spec made to it, each computed once."""
        while len(run.specs) <= site:
            run.forward.step(spec=run.specs[-1])
            run.specs.append(run.forward.spec())
        return run.specs[site]


def kinds(sites: Sites, why: str) -> tuple[Kind, ...]:
    """Every kind of attention of the model of ``sites``, stack after stack, in the order a layer runs them: an
    encoder-decoder's encoder self-attention, decoder causal self-attention and cross-attention. A decoder's say
    ``why`` they cannot be reached where ``sites`` has no target."""
    from attnx.analysis.explore import Kind

    found = []
    for stack in sites.model.stacks:
        decoder = any(not attention.is_self for attention in stack.attentions)
        for which, attention in enumerate(stack.attentions):
            flag = attention.kind.value.replace(" ", "-")  # as --attention names it
            found.append(Kind(
                stack.name, attention.kind.label, flag, stack.layers, functools.partial(sites.spec, stack, which),
                why=why if decoder and sites.target is None else None,
                rolls=attention.kind is AttentionKind.SELF and not decoder, target=decoder,
            ))  # fmt: skip
    return tuple(found)

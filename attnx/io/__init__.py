"""Loading attention problems: from files, stdin, a random seed, or the built-in example."""

from __future__ import annotations

from importlib import resources

from attnx.io.arrays import load_npz
from attnx.io.documents import Document, load_document, parse_document
from attnx.io.schema import Overrides, spec_from_document
from attnx.spec import AttentionSpec

__all__ = ["BUILTIN_NAME", "Overrides", "builtin_document", "load_spec"]

BUILTIN_NAME = "cat-sat-on-mat"


def builtin_document() -> Document:
    """The worked example "The cat sat on mat" (H=2), shipped inside the package."""
    # Shipped as JSON (the same document as configs/cat-sat-on-mat.yaml) so that `attnx run` with no
    # file never pays for importing a YAML parser.
    text = resources.files("attnx.data").joinpath(f"{BUILTIN_NAME}.json").read_text("utf-8")
    return parse_document(text, f"built-in example ({BUILTIN_NAME})")


def load_spec(source: str | None = None, overrides: Overrides | None = None) -> AttentionSpec:
    """Build the spec for ``source``: a path, ``-`` for stdin, or None.

    With no source, a seed given in ``overrides`` draws random Q/K/V; otherwise the built-in
    example is used.
    """
    overrides = overrides or Overrides()
    if source is not None and source.lower().endswith(".npz"):
        doc = load_npz(source)
    elif source is not None:
        doc = load_document(source)
    elif overrides.seed is not None:
        doc = Document({}, "command line")
    else:
        doc = builtin_document()
    return spec_from_document(doc, overrides)

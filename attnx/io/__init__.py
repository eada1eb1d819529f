"""Loading attention problems: from files, stdin, a random seed, or the built-in example."""

from __future__ import annotations

from pathlib import Path

from attnx.core.overrides import SettingOverrides
from attnx.core.spec import AttentionSpec
from attnx.errors import InputError
from attnx.io.documents import STDIN, Document, decode_text, parse_document, read_bytes
from attnx.io.schema import InputOverrides, spec_from_document
from attnx.limits import Limits

__all__ = [
    "BUILTIN_NAME",
    "InputOverrides",
    "Limits",
    "SettingOverrides",
    "builtin_document",
    "load_source",
    "load_spec",
]

BUILTIN_NAME = "cat-sat-on-mat"


def builtin_document(limits: Limits | None = None) -> Document:
    """The worked example "The cat sat on mat" (H=2), shipped inside the package, read under ``limits``."""
    # Shipped as JSON (the same document as configs/cat-sat-on-mat.yaml) so that `attnx run` with no
    # file never pays for importing a YAML parser.
    # A plain path: importlib.resources would import zipfile on every start-up.
    text = (Path(__file__).parent.parent / "data" / f"{BUILTIN_NAME}.json").read_text("utf-8")
    return parse_document(text, f"built-in example ({BUILTIN_NAME})", limits)


def load_source(source: str, limits: Limits | None = None) -> Document:
    """Read ``source`` (a path, or ``-`` for stdin) through the border: YAML, JSON or ``.npz``.

    The kind is told by the content (an .npz is a zip archive), or by a ``.npz`` name. At most
    ``limits.max_bytes`` are read; a lone ``.npy`` is refused unread, as it cannot hold a whole input.
    """
    limits = limits or Limits.from_env()
    if source != STDIN and source.lower().endswith(".npy"):
        raise InputError(_NPY_REFUSED.format(name=source))
    from attnx.io.arrays import NPY_MAGIC, ZIP_MAGIC, parse_npz  # zipfile only when a file is read

    raw, name = read_bytes(source, limits)
    if raw.startswith(NPY_MAGIC):
        raise InputError(_NPY_REFUSED.format(name=name))
    if raw.startswith(ZIP_MAGIC) or name.lower().endswith(".npz"):
        return parse_npz(raw, name, limits)
    return parse_document(decode_text(raw, name), name, limits)


_NPY_REFUSED = (
    "{name}: a .npy file holds one array, but an input needs q, k and v; "
    "save them together with numpy.savez('input.npz', q=q, k=k, v=v) and pass the .npz"
)


def load_spec(
    source: str | None = None,
    overrides: InputOverrides | None = None,
    limits: Limits | None = None,
    settings: SettingOverrides | None = None,
) -> AttentionSpec:
    """Build the spec for ``source``: a path, ``-`` for stdin, or None.

    With no source, a seed given in ``overrides`` draws random Q/K/V; otherwise the built-in
    example is used. ``limits`` default to ``Limits.from_env()`` (the ``ATTNX_MAX_*`` variables). ``settings``
    replace the input's own (as they replace a model layer's).
    """
    overrides = overrides or InputOverrides()
    limits = limits or Limits.from_env()
    if source is not None:
        doc = load_source(source, limits)
    elif overrides.seed is not None:
        doc = Document({}, "command line", limits=limits)
    else:
        doc = builtin_document(limits)
    spec = spec_from_document(doc, overrides)
    return settings.apply(spec) if settings is not None else spec

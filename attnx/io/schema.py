"""Input contract version 1: turning a parsed document into an AttentionSpec."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnx.core.positions import RopeScaling, Rotary
from attnx.core.spec import LAYOUTS, SCALE_MODES, AttentionSpec, Linear
from attnx.core.tensors import WEIGHTS
from attnx.errors import ConfigError
from attnx.io.cells import (
    check_shape,
    describe,
    finite,
    matrix,
    numeric_array,
    shape,
    token_list,
    vector,
    whole,
)
from attnx.io.documents import Document
from attnx.io.messages import did_you_mean

INPUT_VERSION = 1
KEYS = (
    "version", "tokens", "query_tokens", "key_tokens", "heads", "kv_heads",
    "q", "k", "v", "x", "x_kv", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v", "w_o", "b_o",
    "seed", "d_model", "causal", "mask", "padding", "scale", "layout", "rope", "window", "softcap", "score_bias",
)  # fmt: skip
DEFAULT_HEADS = 1
DEFAULT_D_MODEL = 8


@dataclass(frozen=True)
class InputOverrides:
    """Values given on the command line that say what the input is; each one that is not None replaces the
    document's key. (Settings that replace an input's own, for files and models alike, are
    ``attnx.core.overrides.SettingOverrides``.)

    ``seed``, ``tokens`` and ``d_model`` describe random inputs; ``heads`` splits the input; ``kv_heads`` sets
    how many K/V heads random inputs draw, or how many an input with K and V narrower than Q holds; on an input
    whose K and V have more heads, their heads are mean-pooled within each group (``AttentionSpec.with_kv_heads``).
    """

    seed: int | None = None
    tokens: tuple[str, ...] | None = None
    d_model: int | None = None
    heads: int | None = None
    kv_heads: int | None = None

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``data`` with these values put in.

        ``kv_heads`` goes in only where it says what the input holds: for random inputs (a seed),
        and for K/V narrower than Q with no ``kv_heads`` of their own. Otherwise ``spec_from_document``
        pools the input's K/V heads down to it.
        """
        merged = dict(data)
        for key in ("heads", "seed", "d_model"):
            if getattr(self, key) is not None:
                merged[key] = getattr(self, key)
        if self.tokens is not None:
            merged["tokens"] = list(self.tokens)
        if self.kv_heads is not None and ("seed" in merged or ("kv_heads" not in merged and _narrow_kv(merged))):
            merged["kv_heads"] = self.kv_heads
        return merged


def _narrow_kv(data: dict[str, Any]) -> bool:
    """True when ``k`` (or ``w_k``) is a matrix with fewer columns than ``q`` (or ``w_q``) has."""
    for left, right in (("q", "k"), ("w_q", "w_k")):
        q_width, k_width = _width(data.get(left)), _width(data.get(right))
        if q_width is not None and k_width is not None:
            return k_width < q_width
    return False


def _width(value: Any) -> int | None:
    """Columns of a matrix written as rows or held as an array, or None when it is neither."""
    if isinstance(value, np.ndarray):
        return int(value.shape[1]) if value.ndim == 2 else None
    if isinstance(value, list) and value and isinstance(value[0], list):
        return len(value[0])
    return None


def spec_from_document(doc: Document, overrides: InputOverrides | None = None) -> AttentionSpec:
    """Check every key of ``doc`` against the contract and build the spec it describes.

    An ``overrides.kv_heads`` smaller than the K/V heads the input holds mean-pools them
    (``AttentionSpec.with_kv_heads``); the spec records the count before in ``kv_pooled_from``.
    """
    overrides = overrides or InputOverrides()
    if "format_version" in doc.data:
        raise doc.error((), _OUTPUT_NOT_INPUT.format(name=doc.name) if WEIGHTS in doc.data else _OTHER_OUTPUT)
    data = overrides.apply(doc.data)
    for key in data:
        if key not in KEYS:
            raise doc.error((key,), f"unknown key{did_you_mean(key, KEYS)}; known keys: {', '.join(KEYS)}", key=True)

    version = data.get("version", INPUT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version != INPUT_VERSION:
        raise doc.error(("version",), f"unsupported input version {version!r}; this attnx reads version 1")

    heads = whole(doc, data, "heads", DEFAULT_HEADS, minimum=1)
    kv_heads = whole(doc, data, "kv_heads", heads, minimum=1)
    inputs = _inputs(doc, data)
    n, m = inputs["n"], inputs["m"]
    query_tokens, key_tokens = _labels(doc, data, n, m, self_attention=inputs["self_attention"])
    causal, mask = _mask(doc, data, n, m)
    spec = AttentionSpec.build(
        q=inputs.get("q"),
        k=inputs.get("k"),
        v=inputs.get("v"),
        x=inputs.get("x"),
        x_kv=inputs.get("x_kv"),
        w_q=inputs.get("w_q"),
        w_k=inputs.get("w_k"),
        w_v=inputs.get("w_v"),
        w_o=_linear(doc, data, "w_o", "b_o"),
        heads=heads,
        kv_heads=kv_heads,
        tokens=query_tokens,
        key_tokens=key_tokens,
        source=doc.name,
        scale=_scale(doc, data),
        layout=_choice(doc, data, "layout", LAYOUTS),
        rotary=_rope(doc, data),
        window=whole(doc, data, "window", 0, minimum=1) if "window" in data else None,
        softcap=_softcap(doc, data),
        causal=causal,
        mask=mask,
        padding=_flags(doc, data, "padding", m) if "padding" in data else None,
        score_bias=_score_bias(doc, data, heads, n, m) if "score_bias" in data else None,
        limits=doc.limits,
    )
    if overrides.kv_heads is not None and overrides.kv_heads != spec.settings.kv_heads:
        spec = spec.with_kv_heads(overrides.kv_heads)
    doc.limits.check_problem(spec, matrices=False)  # Q, K and V; attnx.engines.compute checks what it builds
    return spec


_OUTPUT_NOT_INPUT = (
    "this is an attnx result (from `attnx run --format json`), not an input: compare it with "
    "`attnx diff {name} OTHER` (another result or an input), or run the input it was made from"
)
_OTHER_OUTPUT = (
    "this is attnx output (JSON with format_version), not an input; an input holds q, k and v, "
    "x with w_q, w_k and w_v, or a seed and tokens"
)


def _inputs(doc: Document, data: dict[str, Any]) -> dict[str, Any]:
    """The Q/K/V inputs in one of three forms (direct, projected, random), with N and M."""
    direct = [key for key in ("q", "k", "v") if key in data]
    projected = [key for key in ("x", "x_kv", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v") if key in data]
    if "seed" in data:
        clash = direct + projected
        if clash:
            raise doc.error((clash[0],), "give either the inputs or a seed to draw q, k and v from, not both")
        seed = whole(doc, data, "seed", 0, minimum=0)
        if "tokens" not in data and "query_tokens" not in data:
            raise doc.error(("seed",), "a seed needs tokens, to know how many rows to draw")
        count = len(token_list(doc, data, "tokens" if "tokens" in data else "query_tokens"))
        d_model = whole(doc, data, "d_model", DEFAULT_D_MODEL, minimum=1)
        check_shape(doc, ("d_model",) if "d_model" in data else ("seed",), (count, d_model))
        q, k, v = random_qkv(seed, count, d_model, _random_kv_width(doc, data, d_model))
        return {"q": q, "k": k, "v": v, "n": count, "m": count, "self_attention": True}
    if direct and projected:
        raise doc.error((projected[0],), "give either x with w_q, w_k, w_v or direct q, k, v, not both")
    if projected:
        if "x" not in data:
            raise doc.error((projected[0],), "projections need x (the input rows)")
        missing = [key for key in ("w_q", "w_k", "w_v") if key not in data]
        if missing:
            raise doc.error((), f"missing {', '.join(missing)}: x is projected by w_q, w_k and w_v")
        x = matrix(doc, data["x"], ("x",))
        x_kv = matrix(doc, data["x_kv"], ("x_kv",)) if "x_kv" in data else None
        _check_width(doc, "d_model", data, x.shape[1], "x")
        return {
            "x": x,
            "x_kv": x_kv,
            "w_q": _linear(doc, data, "w_q", "b_q"),
            "w_k": _linear(doc, data, "w_k", "b_k"),
            "w_v": _linear(doc, data, "w_v", "b_v"),
            "n": x.shape[0],
            "m": (x_kv if x_kv is not None else x).shape[0],
            "self_attention": x_kv is None,
        }
    if len(direct) != 3:
        missing = [key for key in ("q", "k", "v") if key not in data]
        raise doc.error((), f"missing {', '.join(missing)}: give q, k and v, x with w_q, w_k and w_v, or a seed")
    q, k, v = (matrix(doc, data[key], (key,)) for key in ("q", "k", "v"))
    _check_width(doc, "d_model", data, q.shape[1], "q")
    if k.shape != v.shape:
        raise doc.error((), f"k and v must have the same shape (a row per key), got k {shape(k)}, v {shape(v)}")
    if k.shape[1] != q.shape[1] and "kv_heads" not in data:
        raise doc.error(
            (),
            f"q, k and v must have the same number of columns (d_model), got q {shape(q)}, k {shape(k)}, "
            f"v {shape(v)} (with kv_heads, k and v have kv_heads × d_k columns)",
        )
    self_attention = k.shape[0] == q.shape[0] and "key_tokens" not in data
    return {"q": q, "k": k, "v": v, "n": q.shape[0], "m": k.shape[0], "self_attention": self_attention}


def _labels(
    doc: Document, data: dict[str, Any], n: int, m: int, *, self_attention: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Query and key labels: ``tokens`` for both in self-attention, or ``query_tokens``/``key_tokens``."""
    if "tokens" in data and "query_tokens" in data:
        raise doc.error(("query_tokens",), "give tokens (self-attention) or query_tokens, not both")
    query_key = "query_tokens" if "query_tokens" in data else "tokens"
    queries = token_list(doc, data, query_key) if query_key in data else tuple(f"t{i}" for i in range(n))
    if len(queries) != n:
        raise doc.error((query_key,), f"{len(queries)} tokens given but there are {n} queries")
    if "key_tokens" in data:
        keys = token_list(doc, data, "key_tokens")
    elif self_attention:
        keys = queries
    else:
        keys = tuple(f"k{j}" for j in range(m))
    if len(keys) != m:
        where = "key_tokens" if "key_tokens" in data else query_key
        raise doc.error((where,), f"{len(keys)} key tokens given but there are {m} keys")
    return queries, keys


def _mask(doc: Document, data: dict[str, Any], n: int, m: int) -> tuple[bool, np.ndarray | None]:
    """``mask: causal`` or an N × M matrix of 1 (may attend) and 0 (blocked); ``causal: true`` adds a causal
    mask to either, as ``--causal`` does."""
    causal = _switch(doc, data, "causal")
    if "mask" not in data:
        return causal, None
    value = data["mask"]
    if isinstance(value, str) and value == "causal":
        return True, None
    if isinstance(value, str):
        raise doc.error(("mask",), f"expected 'causal' or a {n} × {m} matrix of 0 and 1, got {describe(value)}")
    rows = value.tolist() if isinstance(value, np.ndarray) else value if isinstance(value, list) else None
    if rows is None or len(rows) != n:
        got = f"{len(rows)} rows" if rows is not None else describe(value)
        raise doc.error(("mask",), f"expected 'causal' or a {n} × {m} matrix (queries × keys), got {got}")
    return causal, np.array([_flags(doc, {"row": row}, "row", m, path=("mask", i)) for i, row in enumerate(rows)])


def _score_bias(doc: Document, data: dict[str, Any], heads: int, n: int, m: int) -> np.ndarray:
    """``score_bias``: one N × M matrix of real, finite numbers per query head (nested lists H × N × M, or a 3-D
    array), added to the scaled scores before the soft cap and the mask."""
    value, path = data["score_bias"], ("score_bias",)
    expected = f"{heads} × {n} × {m} (heads × queries × keys)"
    if isinstance(value, np.ndarray):
        if value.shape != (heads, n, m):
            raise doc.error(path, f"expected an array of {expected}, got shape {value.shape}")
        return numeric_array(doc, value, path, ndim=3)
    if not isinstance(value, list) or len(value) != heads:
        got = f"{len(value)} heads" if isinstance(value, list) else describe(value)
        raise doc.error(path, f"expected one matrix per head, {expected}, got {got}")
    check_shape(doc, path, (heads, n, m))
    out = []
    for h, rows in enumerate(value):
        found = matrix(doc, rows, (*path, h))
        if found.shape != (n, m):
            got = " × ".join(map(str, found.shape))
            raise doc.error((*path, h), f"expected {n} × {m} (queries × keys), got {got}")
        out.append(found)
    return np.stack(out)  # (H, N, M)


def _switch(doc: Document, data: dict[str, Any], key: str) -> bool:
    """A yes-or-no key: ``true`` or ``false``, or 1 or 0 (an .npz holds ``numpy.savez(causal=True)`` as a 0-d
    boolean, ``causal=1`` as a 0-d integer); absent is false."""
    value = data.get(key, False)
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise doc.error((key,), f"expected true or false (or 1 or 0), got {describe(value)}")


def _flags(
    doc: Document, data: dict[str, Any], key: str, count: int, path: tuple[str | int, ...] | None = None
) -> np.ndarray:
    """A list of ``count`` 0/1 (or boolean) flags."""
    path = path or (key,)
    value = data[key]
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list) or len(value) != count:
        got = f"{len(value)} values" if isinstance(value, list) else describe(value)
        raise doc.error(path, f"expected {count} flags (0 or 1), got {got}")
    for j, flag in enumerate(value):
        if flag not in (0, 1) or not isinstance(flag, (int, bool)):
            raise doc.error((*path, j), f"expected 0 or 1, got {describe(flag)}")
    return np.array(value, dtype=bool)


def _linear(doc: Document, data: dict[str, Any], weight: str, bias: str) -> Linear | None:
    if weight not in data:
        if bias in data:
            raise doc.error((bias,), f"a bias needs its weight {weight}")
        return None
    w = matrix(doc, data[weight], (weight,))
    b = vector(doc, data[bias], (bias,)) if bias in data else None
    if b is not None and b.shape[0] != w.shape[1]:
        raise doc.error((bias,), f"has {b.shape[0]} values but {weight} has {w.shape[1]} columns")
    return Linear.of(w, b)


def _scale(doc: Document, data: dict[str, Any]) -> str | float:
    value = data.get("scale", "sqrt_dk")
    if isinstance(value, str) and value in SCALE_MODES:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value):
        return float(value)
    raise doc.error(("scale",), f"expected a number or one of {', '.join(SCALE_MODES)}, got {describe(value)}")


def _softcap(doc: Document, data: dict[str, Any]) -> float | None:
    """The ``softcap`` key: a positive number, or absent (null) for none."""
    value = data.get("softcap")
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value) and value > 0:
        return float(value)
    raise doc.error(("softcap",), f"expected a positive number, got {describe(value)}")


ROPE_KEYS = ("theta", "pairs", "fraction", "scaling")
SCALING_KEYS = tuple(field.name for field in dataclasses.fields(RopeScaling))  # every kind's keys


def _rope(doc: Document, data: dict[str, Any]) -> Rotary | None:
    """The ``rope`` key: absent, null or false (none), true (the defaults), or a mapping of theta, pairs, fraction."""
    value = data.get("rope")
    if value is None or value is False:
        return None
    if value is True:
        return Rotary()
    if not isinstance(value, dict):
        raise doc.error(
            ("rope",), f"expected true, false or a mapping of {', '.join(ROPE_KEYS)}, got {describe(value)}"
        )
    for key in value:
        if key not in ROPE_KEYS:
            raise doc.error(("rope", key), f"unknown key; known keys: {', '.join(ROPE_KEYS)}", key=True)
    fields = dict(value)
    scaling = fields.get("scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise doc.error(("rope", "scaling"), f"expected a mapping of {', '.join(SCALING_KEYS)}")
        for key in scaling:
            if key not in SCALING_KEYS:
                known = ", ".join(SCALING_KEYS)
                raise doc.error(("rope", "scaling", key), f"unknown key; known keys: {known}", key=True)
        try:  # lists (longrope's short and long factors) as the tuples the settings keep
            values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in scaling.items()}
            fields["scaling"] = RopeScaling(**values)
        except (ConfigError, TypeError) as exc:  # TypeError: kind or factor missing
            message = "needs kind and factor" if isinstance(exc, TypeError) else str(exc)
            raise doc.error(("rope", "scaling"), message.removeprefix("rope scaling: ")) from None
    try:
        return Rotary(**fields)
    except ConfigError as exc:
        raise doc.error(("rope",), str(exc).removeprefix("rope ")) from None


def _choice(doc: Document, data: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = data.get(key, choices[0])
    if not isinstance(value, str) or value not in choices:
        raise doc.error((key,), f"expected one of {', '.join(choices)}, got {describe(value)}")
    return value


def _check_width(doc: Document, key: str, data: dict[str, Any], width: int, name: str) -> None:
    if key in data:
        d_model = whole(doc, data, key, 0, minimum=1)
        if d_model != width:
            raise doc.error((key,), f"is {d_model} but {name} has {width} columns")


def _random_kv_width(doc: Document, data: dict[str, Any], d_model: int) -> int:
    """Columns of random K and V: ``kv_heads × d_k`` (never more than ``d_model``, already checked against the
    caps), or ``d_model`` when the head counts do not fit (the spec then says why)."""
    heads = whole(doc, data, "heads", DEFAULT_HEADS, minimum=1)
    kv_heads = whole(doc, data, "kv_heads", heads, minimum=1)
    return kv_heads * (d_model // heads) if d_model % heads == 0 and heads % kv_heads == 0 else d_model


def random_qkv(
    seed: int, n: int, d_model: int, kv_width: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q ``[n, d_model]``, then K and V ``[n, kv_width]`` (default ``d_model``), from one generator.

    With ``rng = numpy.random.default_rng(seed)``: ``q = rng.standard_normal((n, d_model))``, then
    ``k, v = rng.standard_normal((2, n, kv_width))``, where ``kv_width = kv_heads × d_k``. The
    generator fills arrays in order, so with ``kv_width == d_model`` (no grouped K/V heads) these
    are exactly ``rng.standard_normal((3, n, d_model))``: the numbers attnx has always drawn.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d_model))
    k, v = rng.standard_normal((2, n, d_model if kv_width is None else kv_width))
    return q, k, v

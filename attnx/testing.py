"""Attention kernels in test suites: attnx as the float64 reference, and a located report when a kernel is wrong.

```python
from attnx.testing import assert_attention_close

def test_my_kernel():
    q, k, v = ...                      # [B, H, N, d] tensors, as SDPA takes them
    assert_attention_close(my_attention(q, k, v), q, k, v, heads=8, causal=True)
```

Arrays may be NumPy arrays, torch tensors on any device, or anything ``numpy.asarray`` reads, of real
floating-point numbers (float64, float32, float16, bfloat16: integers, booleans, complex numbers, text and objects
are a TypeError naming the argument; NaN or infinity in q, k or v a ValueError), in the layouts kernels use:

- ``[B, H, N, d]`` (SDPA's): ``q`` ``[B, H, N, d]``, ``k`` and ``v`` ``[B, H_kv, M, d]``, ``actual`` the
  head outputs ``[B, H, N, d]`` (or ``[B, N, H, d]``, or the concatenated ``[B, N, H·d]``);
- ``[B, N, H·d]``: ``actual`` ``[B, N, H·d]``;
- ``[N, H·d]``: one sequence, ``actual`` ``[N, H·d]``.

q, k and v share one layout and batch size; k and v one shape (d_v = d_k). Head h owns columns
``h·d … h·d + d − 1`` of an ``H·d`` axis. ``mask`` is boolean (a float or 0/1 mask is a TypeError), True where a
query may attend a key (SDPA's convention), and lines up with the weights from the right as SDPA broadcasts it:
``[N, M]``, ``[B, 1, N, M]`` beside ``[B, H, N, d]`` inputs (one mask for every head), ``[B, N, M]`` beside the
others, B being 1 or the batch size. Every argument is checked before any arithmetic: a TypeError or ValueError
names the one it refuses. ``score_bias`` (``[H, N, M]`` or ``[B, H, N, M]``, real finite floats) is added to the
scaled scores before the mask. The tolerance follows ``actual``'s dtype
(``attnx.analysis.tolerance.default_tolerance``), or the inputs' where they are less precise: a float64 ``actual``
of float32 q, k and v (NumPy 2 promotes ``s / np.sqrt(d)``) is judged at float32's tolerance, and a report says so.
NumPy is imported on first use, torch never: a tensor is read through its own methods.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attnx.core.tensors import HEAD_OUTPUTS, OUTPUT, TENSORS, TensorName

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from attnx.analysis.check_against import Verification
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.limits import Limits

__all__ = ["assert_attention_close", "reference"]

F = TypeVar("F", bound=Callable[..., Any])

# pytest leaves this module's frames out of a failing test's traceback: the test's own line and the report
# are what the reader needs (an error of attnx's own, raised deeper, is raised again from here).
__tracebackhide__ = True


def _is_torch(x: Any) -> bool:
    """True for a torch.Tensor, told without importing torch (a tensor exists only once torch is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


FLOATS = ("float64", "float32", "float16", "bfloat16")  # the dtypes an argument's numbers may be in


def _array(x: Any, name: str, *, finite: bool = True) -> tuple[np.ndarray, str]:
    """``x`` as a float64 NumPy array, and the dtype it was computed in (``float32``, ``bfloat16``, ...): real
    floating-point numbers only (a TypeError names ``name`` otherwise: complex numbers would lose their imaginary
    part, booleans and integers are no attention inputs), each ``finite`` where asked (a ValueError names the
    first that is not)."""
    import numpy as np

    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array of floating-point numbers, got {type(x).__name__}")
    if not _is_torch(x):
        x = _asarray(x, name)
    dtype = _dtype(x)
    if dtype not in FLOATS:
        raise TypeError(f"{name} must hold real floating-point numbers ({', '.join(FLOATS)}), got {dtype}")
    values = x.detach().to("cpu").double().numpy() if _is_torch(x) else x.astype(np.float64)
    if finite and not np.isfinite(values).all():
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        raise ValueError(f"{name} must hold finite numbers, got {values[index]} at {name}{list(index)}")
    return values, dtype


def _dtype(x: Any) -> str:
    """The dtype's name of a torch tensor or a NumPy array: ``float32``, ``bfloat16``."""
    return str(x.dtype).removeprefix("torch.") if _is_torch(x) else str(x.dtype.name)


def _asarray(x: Any, name: str) -> np.ndarray:
    """``numpy.asarray(x)``; what it cannot read (ragged nested lists) is a ValueError naming ``name``."""
    import numpy as np

    try:
        return np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} is not an array: {_clause(exc)}") from None


def _clause(exc: Exception) -> str:
    """The first clause of what NumPy says it cannot read: ``setting an array element with a sequence``."""
    return str(exc).split(";")[0].split(". ")[0]


def _batched(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, kv_heads: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K and V as ``[B, N, H·d]`` (from ``[B, H, N, d]``, ``[B, N, H·d]`` or ``[N, H·d]``), their shapes
    checked against each other and the heads (``kv_heads`` None: ``heads``)."""
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (2, 3, 4):
        raise ValueError(f"q, k and v must all be [B, H, N, d], [B, N, H·d] or [N, H·d], got shapes "
                         f"{q.shape}, {k.shape}, {v.shape}")  # fmt: skip
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        raise ValueError(f"q, k and v must not be empty, got shapes {q.shape}, {k.shape}, {v.shape}")
    keys = q.ndim - 2  # the key axis of k and v
    if k.shape[keys] != v.shape[keys]:
        raise ValueError(f"k and v must have the same number of keys, got {k.shape[keys]} and {v.shape[keys]}")
    if k.shape != v.shape:
        raise ValueError(f"v must have k's shape {k.shape} (attnx takes d_v = d_k), got {v.shape}")
    groups = heads if kv_heads is None else kv_heads
    if q.ndim == 4:
        if q.shape[1] != heads:
            raise ValueError(f"q is [B, H, N, d] with H = {q.shape[1]}, but heads={heads}")
        if q.shape[3] != k.shape[3]:
            raise ValueError(f"k must be [B, H_kv, M, d] with q's d = {q.shape[3]}, got k {k.shape}")
        if k.shape[1] != groups:
            given = f"kv_heads={kv_heads}" if kv_heads is not None else f"kv_heads is heads={heads} by default"
            raise ValueError(f"k and v are [B, H_kv, M, d] with H_kv = {k.shape[1]}, but {given}")
        q, k, v = (x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1) for x in (q, k, v))  # (B, N, H·d)
    elif q.ndim == 2:
        q, k, v = q[None], k[None], v[None]
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"q, k and v must have the same batch size, got {q.shape[0]}, {k.shape[0]} and {v.shape[0]}")
    if q.shape[2] % heads:
        raise ValueError(f"heads={heads} must divide q's width H·d = {q.shape[2]}")
    d = q.shape[2] // heads
    if k.shape[2] != groups * d:
        raise ValueError(f"k must have H_kv·d = {groups} × {d} = {groups * d} columns (d = q's width / heads), "
                         f"got {k.shape[2]}")  # fmt: skip
    return q, k, v


def _boolean(mask: Any) -> np.ndarray:
    """``mask`` as a NumPy array of booleans (a TypeError for any other dtype: a float mask is no boolean one)."""
    import numpy as np

    if _is_torch(mask):
        dtype = str(mask.dtype).removeprefix("torch.")
        if dtype != "bool":
            raise TypeError(f"mask must be boolean (True: may attend), got dtype {dtype}")
        return np.asarray(mask.detach().to("cpu").numpy())
    if isinstance(mask, (str, bytes)):
        raise TypeError(f"mask must be an array of booleans, got {type(mask).__name__}")
    try:
        raw = np.asarray(mask)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise ValueError(f"mask is not an array: {_clause(exc)}") from None
    if raw.dtype != bool:
        raise TypeError(f"mask must be boolean (True: may attend), got dtype {raw.dtype}")
    return raw


def _masks(mask: Any, batch: int, n: int, m: int, rank: int) -> list[np.ndarray | None]:
    """One ``[N, M]`` boolean mask per batch element (None: no mask). The mask lines up with the weights from
    the right, as SDPA broadcasts it: ``[B, 1, N, M]`` beside ``[B, H, N, d]`` inputs (``rank`` 4: one mask for
    every head), ``[B, N, M]`` beside the others, each leading axis 1 or the size it lines up with."""
    if mask is None:
        return [None] * batch
    raw = _boolean(mask)
    if raw.ndim < 2 or raw.shape[-2:] != (n, m):
        raise ValueError(f"mask must end in [N, M] = [{n}, {m}], got shape {raw.shape}")
    lead, target = raw.shape[:-2], ((batch, 1) if rank == 4 else (batch,))
    count = math.prod(lead)
    if count not in (1, batch):
        raise ValueError(f"mask has {count} [N, M] masks for a batch of {batch}")
    lined_up = zip(lead, target[len(target) - len(lead) :], strict=True) if len(lead) <= len(target) else None
    if lined_up is None or any(size not in (1, want) for size, want in lined_up):
        form = "[N, M] or [B, 1, N, M] (one mask for every head)" if rank == 4 else "[N, M] or [B, N, M]"
        sizes = "1" if batch == 1 else f"1 or {batch}"
        raise ValueError(f"mask must be {form} with B = {sizes}, got shape {raw.shape}")
    flat = raw.reshape(-1, n, m)
    return [flat[0 if len(flat) == 1 else b] for b in range(batch)]


@dataclass(frozen=True)
class _Settings:
    """The attention the caller asks for, as the public functions take it, each argument checked as it is made
    (NumPy's integers, floats and booleans are taken as Python's)."""

    heads: int
    kv_heads: int | None
    causal: bool
    mask: Any
    scale: float | None
    window: int | None
    score_bias: Any = None

    def __post_init__(self) -> None:
        import numpy as np

        for name in ("heads", "kv_heads", "window"):
            value = getattr(self, name)
            if value is None and name != "heads":
                continue
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
            object.__setattr__(self, name, int(value))
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads={self.kv_heads} must divide heads={self.heads}")
        if not isinstance(self.causal, (bool, np.bool_)):
            raise TypeError(f"causal must be True or False, got {type(self.causal).__name__}")
        object.__setattr__(self, "causal", bool(self.causal))
        if self.scale is not None:
            object.__setattr__(self, "scale", _scale(self.scale))


def _scale(scale: object) -> float:
    """``scale`` as a finite float (a TypeError for what is no real number, a ValueError for what is not finite)."""
    import numpy as np

    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    try:
        value = float(scale)
    except OverflowError:  # 10**400
        raise ValueError("scale must be finite, got a number beyond float64's range") from None
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite, got {value}")
    return value


def _tolerances(rtol: float | None, atol: float | None) -> None:
    """rtol and atol as ``check_tolerances`` takes them, its refusal a TypeError or ValueError naming the argument."""
    from attnx.analysis.tolerance import check_tolerances
    from attnx.errors import ConfigError

    try:
        check_tolerances(rtol, atol)
    except ConfigError as exc:
        raise (TypeError if "must be a number" in str(exc) else ValueError)(str(exc)) from None


def _biases(bias: Any, batch: int, heads: int, n: int, m: int) -> list[np.ndarray | None]:
    """One ``[H, N, M]`` score bias per batch element (None: no bias): ``[H, N, M]`` for every element, or
    ``[B, H, N, M]`` with B 1 or the batch size; real, finite floating-point numbers (as q's are checked)."""
    if bias is None:
        return [None] * batch
    values, _ = _array(bias, "score_bias")
    values.flags.writeable = False  # one read-only array: the specs share it
    if values.shape == (heads, n, m):
        return [values] * batch
    if values.ndim == 4 and values.shape[1:] == (heads, n, m) and values.shape[0] in (1, batch):
        return [values[0 if len(values) == 1 else b] for b in range(batch)]
    sizes = "1" if batch == 1 else f"1 or {batch}"
    raise ValueError(f"score_bias must be [H, N, M] = [{heads}, {n}, {m}] or [B, H, N, M] with B = {sizes}, "
                     f"got shape {values.shape}")  # fmt: skip


def _specs(q: Any, k: Any, v: Any, settings: _Settings) -> list[AttentionSpec]:
    """One spec per batch element."""
    from attnx.core.spec import AttentionSpec

    qa, ka, va = (_array(x, name)[0] for x, name in ((q, "q"), (k, "k"), (v, "v")))
    qb, kb, vb = _batched(qa, ka, va, settings.heads, settings.kv_heads)
    n, m = qb.shape[1], kb.shape[1]
    queries, keys = tuple(map(str, range(n))), tuple(map(str, range(m)))
    scale = "sqrt_dk" if settings.scale is None else settings.scale
    biases = _biases(settings.score_bias, len(qb), settings.heads, n, m)
    return [
        AttentionSpec.build(
            q=qb[b], k=kb[b], v=vb[b], heads=settings.heads, kv_heads=settings.kv_heads, tokens=queries,
            key_tokens=keys, causal=settings.causal, mask=allowed, scale=scale, window=settings.window,
            score_bias=biases[b], source="q, k and v" if len(qb) == 1 else f"q, k and v (batch element {b})",
        )
        for b, allowed in enumerate(_masks(settings.mask, len(qb), n, m, qa.ndim))
    ]  # fmt: skip


def _raised_here(function: F) -> F:
    """``function``, where an error of attnx's own (an ``AttnxError``) or an argument's TypeError or ValueError raised
    deeper is raised again from this module, without the frames below it: pytest then shows the caller's line and
    the message, nothing of attnx."""
    from attnx.errors import AttnxError

    @functools.wraps(function)
    def raising_here(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (AttnxError, TypeError, ValueError) as exc:  # attnx's refusals of its input, and of its arguments
            raise exc.with_traceback(None) from None

    return cast(F, raising_here)


@_raised_here
def reference(
    q: Any,
    k: Any,
    v: Any,
    *,
    heads: int,
    kv_heads: int | None = None,
    causal: bool = False,
    mask: Any = None,
    scale: float | None = None,
    window: int | None = None,
    score_bias: Any = None,
    limits: Limits | None = None,
) -> AttentionResult:
    """attnx's float64 result for one sequence (no batch axis, or a batch of 1): weights ``[head, query, key]``,
    head outputs ``[head, query, d]``, output ``[query, H·d]`` and every step between.

    Computed through ``attnx.engines.compute``, which refuses with LimitError arrays over ``limits``
    (None: the defaults, replaced by ``ATTNX_MAX_*``)."""
    from attnx.engines import compute
    from attnx.limits import Limits

    settings = _Settings(heads, kv_heads, causal, mask, scale, window, score_bias)
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be attnx.limits.Limits or None, got {type(limits).__name__}")
    specs = _specs(q, k, v, settings)
    if len(specs) != 1:
        raise ValueError(f"reference() computes one sequence; got a batch of {len(specs)}")
    return compute(specs[0], "numpy", dtype="float64", limits=limits)


def _actual(actual: np.ndarray, batch: int, spec: AttentionSpec) -> list[dict[TensorName, np.ndarray]]:
    """The kernel's output per batch element, named as attnx names it (``head_outputs`` or ``output``)."""
    h, n, d = spec.settings.heads, spec.n_queries, spec.d_k
    if actual.ndim == 2:
        actual = actual[None]
    if actual.shape == (batch, h, n, d):
        return [{HEAD_OUTPUTS: actual[b]} for b in range(batch)]
    if actual.shape == (batch, n, h, d) and (n != h or h == 1):
        return [{HEAD_OUTPUTS: actual[b].transpose(1, 0, 2)} for b in range(batch)]
    if actual.shape == (batch, n, h * d):
        return [{OUTPUT: actual[b]} for b in range(batch)]
    raise ValueError(
        f"actual has shape {actual.shape}; for this input expected [B, H, N, d] = {(batch, h, n, d)}, "
        f"[B, N, H·d] = {(batch, n, h * d)} or, without a batch axis, {(n, h * d)}"
    )


def _verifications(actual: Any, q: Any, k: Any, v: Any, settings: _Settings, rtol: float | None,
                   atol: float | None) -> list[Verification]:  # fmt: skip
    """One verification per batch element: ``actual`` against the float64 reference of q, k and v."""
    from attnx.analysis.check import verify_kernel
    from attnx.analysis.tolerance import loosest
    from attnx.io.results import SavedResult

    specs = _specs(q, k, v, settings)  # q, k and v in float64, each checked: the dtype of each is a float's
    inputs = loosest(*(_dtype(x if _is_torch(x) else _asarray(x, "q, k or v")) for x in (q, k, v)))
    values, dtype = _array(actual, "actual", finite=False)  # NaN in actual fails the comparison
    return [
        verify_kernel(
            spec, SavedResult(_read_as(tensors), {}, tensors, dtype), rtol=rtol, atol=atol, inputs_dtype=inputs
        )
        for spec, tensors in zip(specs, _actual(values, len(specs), specs[0]), strict=True)
    ]


def _read_as(tensors: dict[TensorName, np.ndarray]) -> str:
    """What ``actual`` was read as, for the report: ``head_outputs [head, query, d_k]``."""
    return ", ".join(f"{name} [{', '.join(TENSORS[name].axes)}]" for name in tensors)


@_raised_here
def assert_attention_close(
    actual: Any,
    q: Any,
    k: Any,
    v: Any,
    *,
    heads: int,
    kv_heads: int | None = None,
    causal: bool = False,
    mask: Any = None,
    scale: float | None = None,
    window: int | None = None,
    score_bias: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Raise AssertionError, with a located report and the known bug that explains it, when ``actual`` is not
    attention of q, k and v within the tolerance of its dtype (``rtol``, ``atol`` replace it). The report names
    the arguments (``actual``, ``q``, ``k`` and ``v``); pytest shows none of attnx's frames.

    ``scale`` None is 1/√d; ``kv_heads`` (default ``heads``) groups query heads over fewer K/V heads as
    ``repeat_interleave`` does; ``causal`` aligns the mask top-left, as SDPA's ``is_causal``; ``window``
    keeps each query's last ``window`` keys (itself included); ``score_bias`` (``[H, N, M]`` or ``[B, H, N, M]``)
    is added to the scaled scores before the mask, as T5 adds its position bias.
    """
    settings = _Settings(heads, kv_heads, causal, mask, scale, window, score_bias)
    _tolerances(rtol, atol)
    verifications = _verifications(actual, q, k, v, settings, rtol, atol)
    failed = [(b, verification) for b, verification in enumerate(verifications) if not verification.passed]
    if not failed:
        return
    from attnx.render.check import verification_text

    head = f"attention differs from attnx's float64 reference in {len(failed)} of {len(verifications)} batch elements"
    reports = [f"batch element {b}:\n{verification_text(verification)}" for b, verification in failed[:2]]
    raise AssertionError("\n\n".join([head, *reports]))

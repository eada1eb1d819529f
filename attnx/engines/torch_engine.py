"""The PyTorch engine: the shared algorithm on torch tensors (CPU, CUDA, MPS), results back in NumPy."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from functools import cache

import numpy as np
import torch

from attnx.core.choices import DTYPES, HALF
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec, DirectInputs
from attnx.core.tensors import HEAD_OUTPUTS, MATRICES, TensorName
from attnx.engines.arrays import host_dtype, register
from attnx.engines.core import attention, dense, near_one_exponent
from attnx.errors import EngineUnavailableError

PREFERENCE = ("cuda", "mps", "cpu")


def _values_near_one(v: torch.Tensor) -> tuple[torch.Tensor, int]:
    """V scaled by a power of two into [1, 2) where its largest magnitude is far from 1, and the exponent to
    scale the output back by: SDPA sums M terms of V before it divides, which overflows (or underflows) for
    values near the dtype's limits although the output fits (``attnx.engines.core.near_one_exponent``)."""
    exponent = near_one_exponent(float(v.abs().max()) if v.numel() else 0.0)
    if not exponent:
        return v, 0
    return torch.ldexp(v, torch.tensor(-exponent, device=v.device)).to(v.dtype), exponent


class TorchEngine:
    """The PyTorch engine, in one dtype on one device: the shared algorithm on torch tensors (CPU, CUDA, MPS),
    results back in NumPy; the array primitives the algorithm (``attnx.engines.core``) and a model's forward pass
    use (``numpy_dtype``: the dtype its arrays have on the host, float32 for a half type)."""

    name = "torch"
    stacks = False  # one problem at a time
    traced = False  # torch allocates its tensors where tracemalloc does not look

    def __init__(self, dtype: str = DTYPES[0], device: str = "cpu") -> None:
        self.dtype = getattr(torch, dtype)
        self.numpy_dtype = np.dtype(host_dtype(dtype))
        self.half = dtype in HALF
        self.device = torch.device(device)

    def version(self) -> str:
        """Version of PyTorch."""
        return str(torch.__version__)

    def devices(self) -> list[str]:
        """Devices present on this machine, in the order ``auto`` prefers them."""
        present = {
            "cuda": torch.cuda.is_available(),
            "mps": bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available(),
            "cpu": True,
        }
        return [name for name in PREFERENCE if present[name]]

    def dtypes(self, device: str) -> tuple[str, ...]:
        """Dtypes supported on ``device``, the default first: MPS has no float64. The half types compute in torch's
        own kernels (a model in bfloat16 on a GPU, as its checkpoint stores it); results come back widened to
        float32."""
        return ("float32", "float16") if device.startswith("mps") else DTYPES

    def resolve_device(self, requested: str) -> str:
        """The one place devices are chosen: ``auto`` picks CUDA, then MPS, then CPU."""
        present = self.devices()
        if requested == "auto":
            return present[0]
        if requested.split(":")[0] not in present:
            raise EngineUnavailableError(
                f"device {requested!r} is not available to torch here; available: {', '.join(present)}"
            )
        return requested

    def attend(
        self, spec: AttentionSpec, dtype: str, device: str, needs: Collection[TensorName] | None
    ) -> AttentionResult:
        """Compute multi-head attention for ``spec`` with torch: the arrays in ``needs`` (None: all)."""
        ops = torch_on(dtype, device)
        with torch.inference_mode():
            arrays = {name: ops.host(t) for name, t in attention(ops, spec, needs).items()}
        scale = float(torch.tensor(spec.multiplier, dtype=ops.dtype))  # as the dtype holds it (IEEE rounding)
        return AttentionResult.assemble(
            spec, arrays, scale=scale, engine=self.name, device=str(ops.device), dtype=dtype, needs=needs
        )

    def on(self, dtype: str, device: str) -> TorchEngine:
        """This engine in ``dtype`` on ``device`` (``auto`` or a name, resolved as ``compute`` resolves it): one object
        for each."""
        return torch_on(dtype, self.resolve_device(device))

    def sdpa_reference(self, spec: AttentionSpec, dtype: str = "float32", device: str = "cpu") -> Callable[[], object]:
        """A callable running bare ``F.scaled_dot_product_attention`` on ``spec``'s Q/K/V (no attnx around it).

        Benchmarks time it as the reference; the tensors are prepared here, outside the timed call.
        """
        if not isinstance(spec.inputs, DirectInputs):
            raise TypeError("sdpa_reference takes a spec of direct Q, K and V")
        ops = torch_on(dtype, device)
        heads, kv_heads = spec.settings.heads, spec.settings.kv_heads
        direct = spec.inputs
        with torch.inference_mode():
            q, k, v = (
                ops.array(x).view(-1, h, spec.d_k).transpose(0, 1).contiguous()[None]  # (1, H, N, d_k)
                for x, h in ((direct.q, heads), (direct.k, kv_heads), (direct.v, kv_heads))
            )

        def run() -> object:
            with torch.inference_mode():
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != heads)
                if out.device.type == "cuda":
                    torch.cuda.synchronize()
                return out

        return run

    def attend_heads(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec, keep: frozenset[TensorName]
    ) -> dict[TensorName, torch.Tensor]:
        """Output only: torch's fused scaled_dot_product_attention; with matrices, a soft cap, learned sinks or a
        score bias (``spec.dense_only``: SDPA lacks the first two; the bias would be one more H × N × M mask): the
        dense path."""
        if keep & MATRICES or spec.dense_only:
            return dense(self, q, k, v, spec, keep)
        h, h_kv = q.shape[0], k.shape[0]
        mask_is_causal_only = spec.causal_only()
        blocks = None if mask_is_causal_only else spec.allowed()  # None when nothing is masked
        allowed = None if blocks is None else self.array(blocks)
        # A leading batch axis: on the CPU, SDPA's fused (flash) kernel takes 4-D inputs. The heads stay
        # views of the [token, head·d_k] tensors, the layout models use: the kernel reads them in place,
        # and its output follows the query's layout, so it comes back in token order (no copy either way).
        q, k, v = (t[None] for t in (q, k, v))  # (1, H, N, d_k) and (1, H_kv, M, d_k)
        v, exponent = _values_near_one(v)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, is_causal=mask_is_causal_only, scale=spec.multiplier, enable_gqa=h != h_kv
        )[0]  # (H, N, d_k); SDPA's boolean mask means "may attend", as attnx's
        if exponent:
            out = torch.ldexp(out, torch.tensor(exponent, device=out.device))
        if blocks is not None:  # rows with every key blocked are zeros, as in attnx; any other NaN or inf stays
            empty = np.flatnonzero(~blocks.any(axis=1))  # the rows that see no key
            if len(empty):
                out[:, torch.from_numpy(empty).to(out.device)] = 0.0
        return {HEAD_OUTPUTS: out}

    # The array primitives.

    def array(self, values: np.ndarray) -> torch.Tensor:
        """``values`` as a tensor on the device (booleans stay boolean).

        On the CPU, values already in the engine's dtype are shared, not copied: the engine never
        writes to its inputs, and the spec's arrays are read-only.
        """
        dtype = torch.bool if values.dtype == bool else self.dtype
        if self.device.type == "cpu" and (values.dtype == bool or (values.dtype == self.numpy_dtype and not self.half)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's note that the array is read-only
                return torch.from_numpy(values)
        return torch.tensor(values, dtype=dtype, device=self.device)

    def permute(self, x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
        """Reorder dimensions (a view)."""
        return x.permute(axes)

    def softmax_masked(self, x: torch.Tensor, allowed: torch.Tensor | None, *, reuse: bool = False) -> torch.Tensor:
        """torch.softmax where allowed; rows with no allowed key are zeros, not NaN (in a new tensor: torch's
        softmax has no in-place form, and the dense path runs only when matrices are kept)."""
        if allowed is None:
            return torch.softmax(x, dim=-1)
        weights = torch.softmax(x.masked_fill(~allowed, float("-inf")), dim=-1)
        # Only the rows with no allowed key become zeros: a NaN from an overflowed score stays, for the check.
        return weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)

    def join(self, x: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
        """``x`` and ``column`` side by side on the last dimension (a new tensor)."""
        return torch.cat([x, column], dim=-1)

    def like(self, values: np.ndarray) -> torch.Tensor:
        """``values`` on the device in the working dtype (shared with NumPy where they already are, on the CPU)."""
        values = np.asarray(values)
        if values.dtype != self.numpy_dtype:
            values = values.astype(self.numpy_dtype)
        return self.array(values)

    def indices(self, values: np.ndarray) -> torch.Tensor:
        """Integer positions on the device."""
        return torch.as_tensor(np.asarray(values, dtype=np.int64), device=self.device)

    @staticmethod
    def mean(x: torch.Tensor) -> torch.Tensor:
        """The mean over the last axis, kept as an axis of 1."""
        return x.mean(dim=-1, keepdim=True)

    @staticmethod
    def sqrt(x: torch.Tensor) -> torch.Tensor:
        """Square root, elementwise."""
        return torch.sqrt(x)

    @staticmethod
    def tanh(x: torch.Tensor) -> torch.Tensor:
        """Hyperbolic tangent, elementwise."""
        return torch.tanh(x)

    @staticmethod
    def exp(x: torch.Tensor) -> torch.Tensor:
        """Exponential, elementwise."""
        return torch.exp(x)

    @staticmethod
    def erf(x: torch.Tensor) -> torch.Tensor:
        """The error function, elementwise."""
        return torch.erf(x)

    @staticmethod
    def maximum(x: torch.Tensor, low: float) -> torch.Tensor:
        """``max(x, low)``, elementwise."""
        return torch.clamp_min(x, low)

    @staticmethod
    def minimum(x: torch.Tensor, high: float) -> torch.Tensor:
        """``min(x, high)``, elementwise."""
        return torch.clamp_max(x, high)

    @staticmethod
    def clip(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        """``x`` clamped to ``[low, high]``."""
        return torch.clamp(x, low, high)

    @staticmethod
    def zeros_like(x: torch.Tensor) -> torch.Tensor:
        """Zeros of ``x``'s shape, dtype and device."""
        return torch.zeros_like(x)

    @staticmethod
    def concatenate(parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """``parts`` one under another (along the first dimension)."""
        return torch.cat(list(parts))

    @staticmethod
    def split(x: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
        """``x`` cut along its first dimension into consecutive parts of ``sizes`` rows."""
        return list(torch.split(x, list(sizes)))

    def host(self, x: torch.Tensor) -> np.ndarray:
        """A NumPy copy on the host (a half type widened to float32, exactly)."""
        x = x.detach().to("cpu")
        return (x.float() if x.dtype in (torch.bfloat16, torch.float16) else x).contiguous().numpy()


@cache
def torch_on(dtype: str, device: str) -> TorchEngine:
    """The torch engine in ``dtype`` on ``device`` (one object for each: a forward pass's arrays find theirs)."""
    return TorchEngine(dtype, device)


def engine_of(x: torch.Tensor) -> TorchEngine:
    """The engine ``x`` lives on: torch, in its dtype on its device."""
    return torch_on(str(x.dtype).removeprefix("torch."), str(x.device))


register(torch.Tensor, engine_of)

"""The tiled NumPy kernel: attention in cache-sized tiles spread over threads, for inputs too large for one piece.

Each head's scores are made one tile of query rows at a time, and a tile stays in the CPU's cache
from the matmul that writes it, through the softmax passes, to the matmul that reads it. Two
paths, both exact up to rounding (``kernel``):

- ``weights``: when any H × N × M matrix is asked for. A task takes a block of query rows and
  walks the heads; each head's ``rows × M`` tile is made in scratch and written, once, where it
  is kept (the task owns its rows of the head average too).
- ``output``: when only head outputs are needed. A task takes one block of rows of one head and
  walks the keys in tiles: no H × N × M array, nor one query row's full scores, ever exists.

Neither takes a max pass before exp. The score scale s is folded into Q, and c_i = ‖q_i·s‖·max_j ‖k_j‖
bounds every scaled score of row i (Cauchy–Schwarz). While c_i leaves the dtype room (e^c_i times
M times max |v| stays finite, e^−c_i above the smallest trusted denominator), exp is taken as it
is. Otherwise each score of row i is shifted by c_i first, so exp never overflows; c_i does not
depend on the key, so the tiles of a row share it and their sums add up without rescaling.
Each row's denominator is the exp tile times a vector of ones. Rows whose denominator underflows
(c_i far above the true maximum, or every key masked) are recomputed exactly, with the true row
maximum. When raw or scaled scores are asked for, the tiles are scaled and softmaxed with the
textbook max shift (``rows``).

Where NumPy's exp2 is vectorised the exp paths work in base 2: Q is scaled by s·log2(e) and the
tiles take exp2, which costs half as much as exp, since 2^(x·log2 e) = e^x. That choice, the
tile sizes and the thread count are a ``Plan`` made once per process from what the machine is
(``machine``, ``plan``); any plan gives the same numbers up to float rounding.

Tasks run on the calling thread and on helper threads started for the call, with BLAS limited to
one thread each for the call alone (``threads``): NumPy releases the GIL in matmul and in ufuncs,
so the softmax passes run in parallel too. Nothing of the process's state outlives the call.
"""

from __future__ import annotations

import numpy as np

from attnx.core.tensors import HEAD_OUTPUTS, MATRICES, SCALED, SCORES, TensorName
from attnx.engines.tiled.kernel import output_path, weights_path
from attnx.engines.tiled.operands import Operands, Rules
from attnx.engines.tiled.plan import Plan, current_plan, using
from attnx.engines.tiled.rows import softmax_rows_

__all__ = ["Plan", "Rules", "attend_tiled", "current_plan", "softmax_rows_", "using"]


def attend_tiled(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, rules: Rules, keep: frozenset[TensorName]
) -> dict[TensorName, np.ndarray]:
    """Head outputs, plus the matrices in ``keep``, from split heads ``q`` (H,N,d_k), ``k``/``v`` (H_kv,M,d_k)."""
    wanted = keep & MATRICES
    plan = current_plan()
    operands = Operands(q, k, v, rules, exp_paths=not {SCORES, SCALED} & wanted, exp2=plan.exp2)
    if wanted:
        return weights_path(operands, plan, wanted)
    return {HEAD_OUTPUTS: output_path(operands, plan)}

"""Tile and task sizes of the tiled kernel, chosen from the machine once and replaceable in tests."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from attnx.engines.tiled.machine import Machine, this_machine

ROW_STEP = 8  # task sizes are multiples of this


@dataclass(frozen=True)
class Plan:
    """How the tiled kernel cuts one call into tasks and tiles.

    On the output path one tile is rows × (``key_tile_bytes`` / (rows · itemsize)) keys, with
    ``output_rows`` rows, or ``causal_rows`` under a causal mask, where a block of r rows also
    scores the r²/2 keys past the diagonal that the mask then blocks. On the weights path a head's
    tile is rows × M, made in scratch and written once: ``weight_rows`` rows, or fewer to keep the
    tile within ``weight_tile_bytes``. ``cpus`` tasks run at a time; exp is taken in base 2 where
    ``exp2`` (NumPy's exp2 is vectorised). Any plan gives the same numbers up to float rounding.
    """

    cpus: int
    exp2: bool
    output_rows: int = 1024
    causal_rows: int = 512
    weight_rows: int = 512
    weight_tile_bytes: int = 8 << 20
    key_tile_bytes: int = 1 << 20


def plan_for(machine: Machine) -> Plan:
    """The plan for ``machine``: the sizes measured fastest on a 2-core Zen 4 (1 MiB of L2 per core,
    32 MiB of L3; 1024 rows with 512 KiB to 1 MiB tiles were within 3 % of each other with and
    without AVX-512), the key tile scaled to the machine's L2 and kept between 256 KiB and 2 MiB."""
    key_tile = min(2 << 20, max(256 << 10, machine.l2_bytes))
    return Plan(cpus=machine.cpus, exp2=machine.exp2_is_fast, key_tile_bytes=key_tile)


@functools.cache
def machine_plan() -> Plan:
    """This machine's plan, made once per process."""
    return plan_for(this_machine())


_override: ContextVar[Plan | None] = ContextVar("attnx_tiled_plan", default=None)


def current_plan() -> Plan:
    """The plan in force: the one ``using`` set, else this machine's."""
    return _override.get() or machine_plan()


@contextlib.contextmanager
def using(plan: Plan) -> Iterator[Plan]:
    """Run the kernel with ``plan`` inside this block (tests force small tiles and any thread count)."""
    token = _override.set(plan)
    try:
        yield plan
    finally:
        _override.reset(token)


def block_rows(plan: Plan, rows: int, queries: int) -> int:
    """``rows`` query rows per task, or fewer, so that every CPU has a task (a multiple of ``ROW_STEP``)."""
    share = -(-queries // plan.cpus)
    return max(ROW_STEP, min(rows, -(-share // ROW_STEP) * ROW_STEP))


def output_rows(plan: Plan, queries: int, heads: int, largest: int) -> int:
    """Query rows per task on the output path (a multiple of ``ROW_STEP``): ``queries`` cut into the
    fewest blocks of equal size, at most ``largest`` rows, whose tasks (one per block and head) keep
    the CPUs busy to the end.

    The CPUs take the tasks in rounds; the last round may leave some of them idle. Blocks are cut
    finer until that idle time is at most 1/8 of all the CPU time (8 heads on 2 CPUs: whole heads;
    3 heads: halves).
    """
    cpus, blocks = plan.cpus, -(-queries // largest)
    while True:
        share = -(-queries // blocks)  # rows per block, rounded up to a multiple of ROW_STEP
        rows = max(ROW_STEP, -(-share // ROW_STEP) * ROW_STEP)
        tasks = -(-queries // rows) * heads
        rounds = -(-tasks // cpus)
        if rows == ROW_STEP or 8 * tasks >= 7 * cpus * rounds:
            return rows
        blocks += 1


def weight_rows(plan: Plan, keys: int, itemsize: int) -> int:
    """Query rows per task on the weights path: ``plan.weight_rows``, or fewer so that a ``rows × keys``
    tile takes at most ``plan.weight_tile_bytes`` (a multiple of ``ROW_STEP``)."""
    fitting = plan.weight_tile_bytes // (keys * itemsize) // ROW_STEP * ROW_STEP
    return max(ROW_STEP, min(plan.weight_rows, fitting))


def key_tile(plan: Plan, rows: int, itemsize: int) -> int:
    """Keys per tile on the output path: one ``rows × keys`` tile takes about ``plan.key_tile_bytes``."""
    return max(ROW_STEP, plan.key_tile_bytes // (rows * itemsize) // ROW_STEP * ROW_STEP)


def row_blocks(n: int, rows: int) -> list[slice]:
    """``range(n)`` in slices of ``rows``."""
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]

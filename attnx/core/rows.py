"""Which query rows a command shows, chosen once by the command and given to the engine and the renderers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Rows:
    """The query rows shown out of ``total``: all of them, or the first and last with a gap between.

    The engine computes the H × N × M matrices of these rows alone (the output of every row), and
    the tables show them, so that a long input costs what its shown rows cost.
    """

    total: int
    shown: tuple[int, ...]

    @classmethod
    def ends(cls, total: int, most: int | None) -> Rows:
        """All ``total`` rows, or past ``most`` (None: no limit) the first and last halves of ``most``
        (the first half takes the odd row)."""
        if most is None or total <= most:
            return cls(total, tuple(range(total)))
        first = most - most // 2
        return cls(total, (*range(first), *range(total - most // 2, total)))

    @property
    def complete(self) -> bool:
        """True when every row is shown."""
        return len(self.shown) == self.total

    @property
    def hidden(self) -> int:
        """How many rows are left out."""
        return self.total - len(self.shown)


def after_gap(rows: Sequence[int], k: int) -> bool:
    """True when rows were left out between the shown rows ``rows[k - 1]`` and ``rows[k]``."""
    return k > 0 and rows[k] != rows[k - 1] + 1

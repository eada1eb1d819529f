"""Domain errors of attnx: everything a user can get wrong, as one exception family."""

from __future__ import annotations


class AttnxError(Exception):
    """Base of every error attnx reports to a user as one line.

    The message is complete on its own: it says what was found, what was expected and, where a
    location exists, starts with ``file:line:column``.
    """


class InputError(AttnxError):
    """An input file or stream cannot be read or parsed."""


class LimitError(InputError):
    """An input is larger than a cap allows (bytes, depth, dimension, elements); the message says how to raise it."""


class ConfigError(AttnxError):
    """An input was read but does not describe a valid attention problem."""


class UsageError(AttnxError):
    """Command-line options that contradict each other or the input."""


class EngineUnavailableError(AttnxError):
    """The requested engine, device or dtype is not available on this machine."""


class ModelError(AttnxError):
    """A model checkpoint cannot be read, or holds something attnx cannot run."""


class NumericError(AttnxError):
    """The numbers do not fit the chosen dtype: a score or an output overflowed to infinity or NaN."""


class NotComputedError(AttnxError):
    """A result was asked for a tensor it does not hold: ``compute(needs=...)`` left it out, or the input has none."""


class OutputError(AttnxError):
    """The output file cannot be written."""


class ChoiceError(UsageError):
    """A value that names nothing the input or model holds (a token, a query, a head, a layer).

    The message speaks of the value, not of how it was given; the CLI adds the flag that gave it.
    """


class AmbiguousError(ChoiceError):
    """A value that names more than one thing the input holds (a token at several queries)."""

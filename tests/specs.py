"""Terse ways for tests to build a spec: Q, K and V, the head count and the labels, positionally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnx.core.overrides import SettingOverrides
from attnx.core.spec import AttentionSpec
from attnx.io import InputOverrides, load_spec
from attnx.limits import Limits


def spec_of(
    q: np.ndarray | None,
    k: np.ndarray | None,
    v: np.ndarray | None,
    heads: int,
    tokens: Sequence[str],
    key_tokens: Sequence[str],
    source: str = "<input>",
    **rest: Any,
) -> AttentionSpec:
    """``AttentionSpec.build`` with Q, K, V, heads and labels in that order (None for Q, K, V with ``x=``)."""
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=key_tokens, source=source, **rest)


INPUT_KEYS = ("seed", "tokens", "d_model", "heads", "kv_heads")


def split_overrides(**values: Any) -> tuple[InputOverrides, SettingOverrides]:
    """Keywords as the command line gives them, split into what describes the input and the settings that replace
    its own (``drop_heads`` as the settings name it, ``dropped_heads``)."""
    if "drop_heads" in values:
        values["dropped_heads"] = tuple(values.pop("drop_heads"))
    if values.get("causal") is False:
        del values["causal"]
    described = InputOverrides(**{key: values[key] for key in INPUT_KEYS if key in values})
    settings = SettingOverrides(
        **{key: value for key, value in values.items() if key not in ("seed", "tokens", "d_model")}
    )
    return described, settings


def loaded(source: str | None = None, limits: Limits | None = None, **values: Any) -> AttentionSpec:
    """``load_spec`` with the input's flags and the settings given as one set of keywords, as the CLI gives them."""
    described, settings = split_overrides(**values)
    return load_spec(source, described, limits, settings)

"""Flag groups made by ``flag_group`` behave as the frozen dataclasses they are, with FlagGroup's methods."""

from __future__ import annotations

import dataclasses

import pytest

from attnx.cli import flags, viewflags
from attnx.cli.check import AgainstFlags
from attnx.cli.flaggroup import FlagGroup
from attnx.cli.flags import EngineFlags, InputFlags, ModelFlags, TextFlags
from attnx.cli.options import Device, Dtype, Engine
from attnx.cli.viewflags import ViewFlags
from attnx.errors import UsageError

GROUPS = sorted(
    {
        value
        for module in (flags, viewflags)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, FlagGroup)
    },
    key=lambda group: group.__name__,
)


class TestAsADataclass:
    """What a frozen dataclass would do, each group does."""

    @pytest.mark.parametrize("group", [g for g in GROUPS if g is not FlagGroup], ids=lambda g: g.__name__)
    def test_every_group_is_a_frozen_dataclass_made_with_its_defaults(self, group: type) -> None:
        """Each group is a frozen dataclass; made without arguments, each field holds its default."""
        assert dataclasses.is_dataclass(group) and group.__dataclass_params__.frozen  # type: ignore[attr-defined]
        made = group()
        assert {f.name: getattr(made, f.name) for f in dataclasses.fields(group)} == {
            f.name: f.default for f in dataclasses.fields(group)
        }

    def test_equal_by_class_and_values_and_hashed_alike(self) -> None:
        """Two groups are equal when class and values are; equal groups hash alike; another class is never equal."""
        one, same = EngineFlags(engine=Engine.torch), EngineFlags(engine=Engine.torch)
        assert one == same and hash(one) == hash(same) and len({one, same}) == 1
        assert one != EngineFlags() and TextFlags(model="m") != ModelFlags(model="m")

    def test_repr_names_each_field(self) -> None:
        """The repr is the dataclass's: the class, then each field as name=repr."""
        assert repr(EngineFlags(dtype=Dtype.float32)) == (
            "EngineFlags(engine=<Engine.numpy: 'numpy'>, device=<Device.auto: 'auto'>, dtype=<Dtype.float32: 'float32'>)"
        )

    def test_frozen(self) -> None:
        """A field cannot be set or deleted."""
        group = EngineFlags()
        with pytest.raises(dataclasses.FrozenInstanceError):
            group.engine = Engine.torch  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del group.engine  # type: ignore[misc]

    def test_unknown_and_positional_arguments_are_refused(self) -> None:
        """A keyword that is no field, or a positional argument, is a TypeError that names it."""
        with pytest.raises(TypeError, match="unexpected keyword argument 'engnie'"):
            EngineFlags(engnie=Engine.torch)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            EngineFlags(Engine.torch)  # type: ignore[misc]

    def test_post_init_runs(self) -> None:
        """``__post_init__`` checks the values as the group is made: a bad --rows is refused."""
        with pytest.raises(UsageError, match="--rows"):
            ViewFlags(rows="0")
        assert ViewFlags(rows="7").max_rows == 7

    def test_replace_and_inherited_fields(self) -> None:
        """``dataclasses.replace`` makes a changed copy; a group made of groups has all their fields, in order."""
        assert dataclasses.replace(EngineFlags(), device=Device.cpu) == EngineFlags(device=Device.cpu)
        assert [f.name for f in dataclasses.fields(InputFlags)][:3] == ["heads", "kv_heads", "scale"]
        assert InputFlags(seed=3, causal=True).given()["--seed"] == 3

    def test_a_dataclass_made_on_a_group_keeps_its_fields(self) -> None:
        """A group that ``dataclasses.dataclass`` makes on top of these (check's) has their fields and checks."""
        names = [f.name for f in dataclasses.fields(AgainstFlags)]
        assert names == ["against", "kernel_dtype", "tensor", "array_layout", "rtol", "atol"]
        assert AgainstFlags(rtol=1e-3) == AgainstFlags(rtol=1e-3)
        with pytest.raises(UsageError):
            AgainstFlags(rtol=-1.0)

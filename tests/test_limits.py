"""The caps (attnx.limits): their defaults, ATTNX_MAX_* from the environment, and the messages that name them."""

from __future__ import annotations

import pytest

from attnx.errors import LimitError, UsageError
from attnx.limits import Limits, parse_cap, size_text


class TestDefaults:
    """The caps that apply when nothing is set."""

    def test_default_values(self) -> None:
        """256 MiB of input, 64 KiB of YAML, depth 32, 1 Mi per axis, 16 Mi elements per array."""
        limits = Limits()
        assert (limits.max_bytes, limits.max_yaml_bytes, limits.max_depth) == (268_435_456, 65_536, 32)
        assert (limits.max_dimension, limits.max_elements) == (1_048_576, 16_777_216)

    def test_empty_environment_gives_the_defaults(self) -> None:
        """No ATTNX_MAX_* variables and no flags: the defaults."""
        assert Limits.from_env({}) == Limits()


class TestFromEnv:
    """Environment variables replace defaults; flags replace both."""

    def test_variables_set_caps(self) -> None:
        """ATTNX_MAX_BYTES=64K and ATTNX_MAX_ELEMENTS=1000 set those two caps only."""
        limits = Limits.from_env({"ATTNX_MAX_BYTES": "64K", "ATTNX_MAX_ELEMENTS": "1000"})
        assert (limits.max_bytes, limits.max_elements, limits.max_depth) == (65_536, 1000, 32)

    def test_flag_beats_variable(self) -> None:
        """A flag given on the command line wins over the variable."""
        limits = Limits.from_env({"ATTNX_MAX_DEPTH": "40"}, max_depth="50")
        assert limits.max_depth == 50

    def test_none_flag_leaves_the_variable(self) -> None:
        """A flag that was not given (None) does not hide the variable."""
        assert Limits.from_env({"ATTNX_MAX_DIMENSION": "7"}, max_dimension=None).max_dimension == 7

    @pytest.mark.parametrize(
        ("text", "value"),
        [("4096", 4096), ("64k", 65_536), ("512M", 536_870_912), ("1G", 1_073_741_824), ("2GiB", 2_147_483_648)],
    )
    def test_suffixes_are_binary(self, text: str, value: int) -> None:
        """K, M, G (optionally with iB or B) multiply by powers of 1024."""
        assert parse_cap(text, "max_bytes", "--max-bytes") == value

    @pytest.mark.parametrize("text", ["0", "-5", "1.5G", "lots", ""])
    def test_bad_values_name_their_source(self, text: str) -> None:
        """A value that is not a positive whole number is a usage error naming the flag or variable."""
        with pytest.raises(UsageError, match=r"^ATTNX_MAX_BYTES takes a positive whole number"):
            parse_cap(text, "max_bytes", "ATTNX_MAX_BYTES")

    def test_depth_has_a_ceiling(self) -> None:
        """Depth beyond 200 is refused: the YAML composer recurses once per level."""
        with pytest.raises(UsageError, match=r"^--max-depth can be at most 200"):
            Limits.from_env({}, max_depth="201")


class TestMessages:
    """What a cap says when it is exceeded."""

    def test_exceeded_names_the_cap_and_how_to_raise_it(self) -> None:
        """The message says the value found, the cap, the flag and the variable."""
        assert Limits().exceeded("max_bytes", "300 MiB") == (
            "300 MiB exceeds the input size cap of 256 MiB; raise it with --max-bytes or ATTNX_MAX_BYTES"
        )

    def test_check_bytes(self) -> None:
        """check_bytes raises a LimitError that starts with the input's name."""
        with pytest.raises(LimitError, match=r"^in\.yaml: 2 KiB of YAML exceeds the YAML size cap of 1 KiB; "):
            Limits(max_yaml_bytes=1024).check_bytes(2048, "in.yaml", "max_yaml_bytes")

    def test_shape_within_caps(self) -> None:
        """A shape inside every cap has no problem."""
        assert Limits(max_dimension=10, max_elements=100).shape_problem((10, 10)) is None

    def test_shape_over_the_dimension_cap(self) -> None:
        """One axis too long is reported before the element count."""
        problem = Limits(max_dimension=10).shape_problem((11, 1))
        assert problem == (
            "an axis of 11 exceeds the dimension cap of 10 per axis; raise it with --max-dimension or ATTNX_MAX_DIMENSION"
        )

    def test_shape_over_the_element_cap(self) -> None:
        """Too many elements names the shape and the count."""
        problem = Limits().shape_problem((100_000, 1000))
        assert problem is not None
        assert problem.startswith("an array of 100000 × 1000 (100,000,000 elements) exceeds the element cap of ")

    @pytest.mark.parametrize(
        ("size", "text"),
        [(1, "1 byte"), (144, "144 bytes"), (2048, "2 KiB"), (268_435_456, "256 MiB"), (80_000_000_000, "74.51 GiB")],
    )
    def test_size_text(self, size: int, text: str) -> None:
        """Sizes read in binary units with four significant digits."""
        assert size_text(size) == text

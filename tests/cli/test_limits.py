"""The cap flags on every command: one line and exit 2 over a cap, checked at one entry."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import typer

from attnx.cli.errors import guarded
from attnx.errors import ConfigError
from tests.runner import run_attnx

CONFIG = str(Path(__file__).parents[2] / "configs" / "cat-sat-on-mat.yaml")


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """stderr of a run that must end with exit 2 and exactly one line."""
    result = run_attnx(*args, env=env)
    assert result.code == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1
    return result.stderr


class TestLimitFlags:
    """Every command that reads an input takes --max-* flags and ATTNX_MAX_* variables; errors say which cap and how."""

    def test_max_bytes_flag(self) -> None:
        """A file over --max-bytes is refused before it is read."""
        size = Path(CONFIG).stat().st_size
        assert refused("run", CONFIG, "--max-bytes", "100") == (
            f"attnx: error: {CONFIG}: {size} bytes exceeds the input size cap of 100 bytes; "
            "raise it with --max-bytes or ATTNX_MAX_BYTES\n"
        )

    @pytest.mark.parametrize("command", ["run", "trace", "check", "heads"])
    def test_builtin_example_is_capped_too(self, command: str) -> None:
        """The built-in example, with no file given, is read under the flags' caps like any input."""
        extra = ["--token", "cat"] if command == "trace" else []
        assert refused(command, *extra, "--max-elements", "10") == (
            "attnx: error: built-in example (cat-sat-on-mat):5:7: q: an array of 5 × 4 (20 elements) exceeds the "
            "element cap of 10 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS\n"
        )

    def test_variable(self) -> None:
        """ATTNX_MAX_DIMENSION=4 is too small for the five tokens of the worked example."""
        message = refused("run", CONFIG, env={"ATTNX_MAX_DIMENSION": "4"})
        assert ":7:3: q: an axis of 5 exceeds the dimension cap of 4 per axis" in message

    @pytest.mark.parametrize(
        "command", [["trace", "-t", "cat"], ["check"], ["heads"], ["diff", "--heads", "1,2"], ["diff", CONFIG]]
    )
    def test_every_input_command_takes_the_flags(self, command: list[str]) -> None:
        """The same flag works on trace, check, heads, and diff (a sweep, and two inputs)."""
        assert "exceeds the YAML size cap of 100 bytes" in refused(*command, CONFIG, "--max-yaml-bytes", "100")

    def test_raising_a_cap_lets_the_input_through(self) -> None:
        """A flag beats a variable: --max-dimension 8 over ATTNX_MAX_DIMENSION=4."""
        result = run_attnx("run", CONFIG, "--max-dimension", "8", "-f", "json", env={"ATTNX_MAX_DIMENSION": "4"})
        assert result.code == 0, result.stderr

    @pytest.mark.parametrize(
        ("args", "env", "message"),
        [
            (["--max-elements", "lots"], None, "--max-elements takes a positive whole number"),
            ([], {"ATTNX_MAX_BYTES": "-1"}, "ATTNX_MAX_BYTES takes a positive whole number"),
            (["--max-depth", "1000"], None, "--max-depth can be at most 200"),
        ],
    )
    def test_bad_cap_values(self, args: list[str], env: dict[str, str] | None, message: str) -> None:
        """A cap that is not a positive whole number is a usage error naming the flag or variable."""
        assert refused("run", CONFIG, *args, env=env).startswith(f"attnx: error: {message}")

    def test_help_lists_the_caps(self) -> None:
        """run --help shows the Input limits panel with each default and variable."""
        text = run_attnx("run", "--help", env={"COLUMNS": "200"}).stdout
        assert "Input limits" in text
        for piece in ("(default 256 MiB; or ATTNX_MAX_BYTES", "(default 32; or ATTNX_MAX_DEPTH)", "16,777,216"):
            assert piece in text

    def test_npz_on_stdin(self) -> None:
        """An .npz piped to - is told apart from text by its first bytes."""
        buffer = io.BytesIO()
        np.savez(buffer, q=np.eye(2), k=np.eye(2), v=np.eye(2))
        result = run_attnx("run", "-", "-f", "json", stdin=buffer.getvalue())
        assert result.code == 0, result.stderr
        assert '"tokens": ["t0", "t1"]' in result.stdout


class TestOneLine:
    """Whatever a message holds, the error is one line."""

    def test_line_breaks_in_a_message_become_spaces(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An AttnxError whose text spans lines is printed on one."""

        @guarded
        def broken() -> None:
            raise ConfigError("first\nsecond\r\nthird")

        with pytest.raises(typer.Exit) as info:
            broken()
        assert info.value.exit_code == 2
        assert capsys.readouterr().err == "attnx: error: first second third\n"


RANDOM_16 = ["--seed", "0", "--tokens", "a b c d e f g h i j k l m n o p"]
OVER = "exceeds the element cap of 200 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS"


class TestOneCheckedEntry:
    """Every command that computes goes through attnx.engines.compute, which refuses what passes the caps."""

    @pytest.mark.parametrize(
        "args",
        [
            ["run", *RANDOM_16, "-H", "2"],
            ["trace", *RANDOM_16, "-H", "2", "--token", "c", "--max-dimension", "15"],
            ["check", *RANDOM_16, "-H", "2"],
            ["heads", *RANDOM_16, "-H", "2"],
            ["diff", *RANDOM_16, "--heads", "1,2", "-f", "json"],
            ["diff", CONFIG, CONFIG, "--max-elements", "20"],
            ["bench", "--lengths", "16", "--heads", "2", "--d-model", "8", "--engines", "numpy", "--path", "weights"],
        ],
        ids=["run", "trace", "check", "heads", "diff-sweep", "diff-a-b", "bench"],
    )
    def test_every_command_refuses_what_run_refuses(self, args: list[str]) -> None:
        """A problem whose scores pass --max-elements (or --max-dimension) is one line and exit 2, on every command."""
        cap = [] if "--max-dimension" in args or "--max-elements" in args else ["--max-elements", "200"]
        message = refused(*args, *cap)
        assert "the scores: an array of" in message or "exceeds the dimension cap" in message, message
        assert "raise it with --max-" in message, message

    def test_a_sweep_is_checked_for_each_setting(self) -> None:
        """diff --heads 1,2 refuses the 1-head scores (256 elements) before computing any variant."""
        message = refused("diff", *RANDOM_16, "--heads", "1,2", "--max-elements", "200")
        assert message == f"attnx: error: command line: the scores: an array of 1 × 16 × 16 (256 elements) {OVER}\n"

    def test_output_alone_builds_no_matrix(self, tmp_path: Path) -> None:
        """run -f npy --tensor output takes the blocked path, which holds no H × N × M array: within the cap."""
        out = tmp_path / "output.npy"
        result = run_attnx("run", *RANDOM_16, "-H", "2", "-f", "npy", "--tensor", "output", "--max-elements", "200",
                           "-o", str(out))  # fmt: skip
        assert result.code == 0, result.stderr
        assert np.load(out).shape == (16, 8)  # 16 tokens × d_model 8

    def test_the_python_api_refuses_too(self) -> None:
        """attnx.compute checks the caps the spec was read under, as the commands do."""
        import attnx
        from attnx.errors import LimitError
        from attnx.limits import Limits

        spec = attnx.load_spec(
            overrides=attnx.InputOverrides(seed=0, tokens=tuple("abcdefghijklmnop"), heads=2),
            limits=Limits(max_elements=200),
        )
        with pytest.raises(LimitError, match="the scores: an array of 2 × 16 × 16"):
            attnx.compute(spec)
        assert attnx.compute(spec, needs={"output"}).output.shape == (16, 8)

"""attnx in scripts: machine formats, round trips, -o files, terminals, pipes and signals."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnx.engines import compute
from attnx.io import load_spec
from attnx.io.results import load_result
from attnx.render.formats import TENSOR_AXES
from attnx.render.serialize import FORMAT_VERSION
from tests.runner import Outcome, run_attnx
from tests.specs import loaded

ATTNX = [sys.executable, "-m", "attnx"]
ANSI = "\x1b["


def invoke(*args: str, stdin: bytes = b"") -> Outcome:
    """`attnx ARGS` piped, which must exit 0."""
    result = run_attnx(*args, stdin=stdin)
    assert result.code == 0, result.stderr
    return result


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def worked():
    return compute(load_spec())


class TestRunFormats:
    def test_jsonl_records_match_the_result(self, worked) -> None:
        """jsonl: one record per head and query, then per query; values equal the result's."""
        lines = invoke("run", "-f", "jsonl").stdout.splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == 2 * 5 + 5
        head_query = [r for r in records if r["record"] == "head_query"]
        for r in head_query:
            assert r["format_version"] == FORMAT_VERSION
            np.testing.assert_array_equal(r["weights"], worked.weights[r["head"], r["query"]])
            np.testing.assert_array_equal(r["head_output"], worked.head_outputs[r["head"], r["query"]])
        per_query = [r for r in records if r["record"] == "query"]
        np.testing.assert_array_equal([r["output"] for r in per_query], worked.output)

    def test_csv_is_tidy_and_complete(self, worked) -> None:
        """csv: header names the axes and ends in value; every number of the chosen tensors, once."""
        text = invoke("run", "-f", "csv", "--tensor", "weights", "--tensor", "output").stdout
        rows = list(csv.DictReader(io.StringIO(text)))
        header = text.splitlines()[0].split(",")
        assert header == ["tensor", "head", "query", "key", "dim", "query_token", "key_token", "value"]
        weights = [r for r in rows if r["tensor"] == "weights"]
        assert len(weights) == worked.weights.size
        for r in weights:
            assert float(r["value"]) == worked.weights[int(r["head"]), int(r["query"]), int(r["key"])]
            assert r["query_token"] == worked.tokens[int(r["query"])] and r["dim"] == ""
        outputs = [r for r in rows if r["tensor"] == "output"]
        assert {(int(r["query"]), int(r["dim"])) for r in outputs} == set(np.ndindex(worked.output.shape))
        assert all(float(r["value"]) == worked.output[int(r["query"]), int(r["dim"])] for r in outputs)

    def test_csv_weights_only_header(self) -> None:
        """For weights alone the axes are tensor,head,query,key (labels before value)."""
        header = invoke("run", "-f", "csv", "--tensor", "weights").stdout.splitlines()[0]
        assert header == "tensor,head,query,key,query_token,key_token,value"

    def test_npy_one_tensor(self, worked) -> None:
        """npy writes the one tensor named by --tensor."""
        data = run_attnx("run", "-f", "npy", "--tensor", "weights").stdout_bytes
        np.testing.assert_array_equal(np.load(io.BytesIO(data)), worked.weights)

    def test_npy_needs_exactly_one_tensor(self) -> None:
        """npy without --tensor is exit 2 naming the tensors."""
        result = run_attnx("run", "-f", "npy")
        assert result.code == 2
        assert "--format npy writes one tensor: name it with --tensor (scores, scaled, weights" in result.stderr

    def test_npz_every_tensor_named_as_json(self, worked, tmp_path: Path) -> None:
        """npz holds every tensor under its JSON key, plus the token labels."""
        path = tmp_path / "run.npz"
        invoke("run", "-f", "npz", "--output", str(path))
        with np.load(path) as archive:
            assert set(archive.files) == {
                *(n for n in TENSOR_AXES if getattr(worked, n) is not None),
                "tokens",
                "key_tokens",
            }
            for name in ("scores", "scaled", "weights", "head_outputs", "output", "average_weights"):
                np.testing.assert_array_equal(archive[name], getattr(worked, name))
            assert archive["tokens"].tolist() == list(worked.tokens)

    def test_unknown_tensor(self) -> None:
        """--tensor with a name no result has is exit 2 listing the names; one this input lacks says why."""
        result = run_attnx("run", "-f", "csv", "--tensor", "wieghts")
        assert result.code == 2
        assert "unknown tensor 'wieghts' for --tensor; choose from scores, scaled, weights" in result.stderr
        result = run_attnx("run", "-f", "csv", "--tensor", "projected")
        assert result.code == 2
        assert "this result has no 'projected' (the input has no w_o)" in result.stderr


class TestOtherCommandsFormats:
    def test_trace_formats(self, worked) -> None:
        """trace json, jsonl and csv carry the same weights as the result's row of "cat"."""
        data = json.loads(invoke("trace", "-t", "cat", "-f", "json").stdout)
        records = [json.loads(x) for x in invoke("trace", "-t", "cat", "-f", "jsonl").stdout.splitlines()]
        rows = list(csv.DictReader(io.StringIO(invoke("trace", "-t", "cat", "-f", "csv").stdout)))
        for h in range(2):
            expected = worked.weights[h, 1]
            np.testing.assert_allclose([k["weight"] for k in data["heads"][h]["keys"]], expected, rtol=1e-15)
            np.testing.assert_allclose([k["weight"] for k in records[h]["keys"]], expected, rtol=1e-15)
            csv_weights = [float(r["value"]) for r in rows if r["head"] == str(h) and r["quantity"] == "weight"]
            np.testing.assert_allclose(csv_weights, expected, rtol=1e-15)
        assert records[-1]["record"] == "output"
        np.testing.assert_allclose(records[-1]["output"], worked.output[1], rtol=1e-15)

    def test_check_formats(self) -> None:
        """check json, jsonl and csv describe the same rows."""
        rows = json.loads(invoke("check", "-f", "json").stdout)["rows"]
        records = [json.loads(x) for x in invoke("check", "-f", "jsonl").stdout.splitlines()]
        assert [{k: v for k, v in r.items() if k != "format_version"} for r in records] == rows
        table = list(csv.DictReader(io.StringIO(invoke("check", "-f", "csv").stdout)))
        assert len(table) == 5 * len(rows)
        first = [
            r
            for r in table
            if (r["engine"], r["dtype"], r["tensor"]) == (rows[0]["engine"], rows[0]["dtype"], rows[0]["tensor"])
        ]
        assert {r["metric"]: float(r["value"]) for r in first}["max_abs"] == rows[0]["max_abs"]

    def test_engines_formats(self) -> None:
        """engines json, jsonl and csv list the same engines."""
        data = json.loads(invoke("engines", "-f", "json").stdout)["engines"]
        records = [json.loads(x) for x in invoke("engines", "-f", "jsonl").stdout.splitlines()]
        assert [r["name"] for r in records] == [e["name"] for e in data]
        rows = list(csv.DictReader(io.StringIO(invoke("engines", "-f", "csv").stdout)))
        assert {"engine": "numpy", "device": "cpu", "dtype": "float64", "default": "1"}.items() <= rows[0].items()

    @pytest.mark.parametrize("command", [["trace", "-t", "cat"], ["check"], ["engines"]])
    def test_binary_formats_only_for_run(self, command: list[str]) -> None:
        """npz is refused by commands that have no tensors to export, in one line listing the formats they have."""
        outcome = run_attnx(*command, "-f", "npz")
        assert outcome.code == 2 and outcome.stdout == ""
        assert outcome.stderr == (
            "attnx: error: Invalid value for '--format' / '-f': 'npz' is not one of 'table', 'json', 'jsonl', 'csv'. "
            f"(see 'attnx {command[0]} -h')\n"
        )


class TestRoundTripAndInputs:
    def test_json_round_trip_is_exact(self, tmp_path: Path) -> None:
        """A JSON result read back equals the result to full precision (random float64 input)."""
        path = tmp_path / "r.json"
        args = ["--seed", "5", "--tokens", "a b c d e f g", "--d-model", "12", "-H", "3"]
        invoke("run", *args, "-f", "json", "-o", str(path))
        saved = load_result(str(path))
        result = compute(loaded(seed=5, tokens=tuple("abcdefg"), d_model=12, heads=3))
        for name, array in saved.tensors.items():
            assert np.array_equal(array, getattr(result, name)), name
        assert saved.meta["tokens"] == list("abcdefg")

    def test_stdin_yaml(self) -> None:
        """- reads YAML from stdin as well as JSON."""
        result = invoke("run", "-", "-f", "json", stdin=b"heads: 1\nq: [[1.0]]\nk: [[1.0]]\nv: [[4.0]]\n")
        assert json.loads(result.stdout)["output"] == [[4.0]]

    def test_npz_input_with_the_same_keys(self, tmp_path: Path) -> None:
        """An .npz with the YAML keys (tokens as a string array) runs like the YAML."""
        spec = load_spec()
        path = tmp_path / "in.npz"
        np.savez(
            path, q=spec.inputs.q, k=spec.inputs.k, v=spec.inputs.v, heads=np.array(2), tokens=np.array(spec.tokens)
        )
        a = json.loads(invoke("run", str(path), "-f", "json").stdout)
        b = json.loads(invoke("run", "-f", "json").stdout)
        assert a["weights"] == b["weights"] and a["tokens"] == b["tokens"]

    def test_pickled_npz_is_refused(self, tmp_path: Path) -> None:
        """An .npz holding pickled objects is exit 2; nothing is unpickled."""
        path = tmp_path / "evil.npz"
        np.savez(path, q=np.array([{"x": 1}], dtype=object))
        result = run_attnx("run", str(path))
        assert result.code == 2
        assert "holds pickled objects, which attnx never loads" in result.stderr


class TestOutputFile:
    def test_output_writes_file_not_stdout(self, tmp_path: Path) -> None:
        """--output writes the file, prints nothing, and leaves no temp file."""
        path = tmp_path / "out.json"
        result = invoke("run", "-f", "json", "-o", str(path))
        assert result.stdout == ""
        assert json.loads(path.read_text())["heads"] == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]

    def test_table_to_file_is_plain_text(self, tmp_path: Path) -> None:
        """A table written with --output has no ANSI codes, even with FORCE_COLOR."""
        path = tmp_path / "out.txt"
        assert run_attnx("run", "-o", str(path), env={"FORCE_COLOR": "1"}).code == 0
        text = path.read_text()
        assert "0.3664" in text and ANSI not in text

    def test_unwritable_output(self, tmp_path: Path) -> None:
        """An output in a missing folder is an I/O failure: exit 1 with one line."""
        result = run_attnx("run", "-f", "json", "-o", str(tmp_path / "no" / "x.json"))
        assert result.code == 1
        assert result.stderr.startswith(f"attnx: error: {tmp_path / 'no' / 'x.json'}: cannot write")

    def test_full_disk_is_exit_1_and_debug_shows_the_cause(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A write that fails with ENOSPC is exit 1, one line; with --debug the OSError behind it follows."""
        import errno

        def full(fd: int, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", lambda fd: full(fd, b""))
        target = tmp_path / "out.json"
        plain = run_attnx("run", "-f", "json", "-o", str(target))
        assert (plain.code, plain.stderr) == (1, f"attnx: error: {target}: cannot write: No space left on device\n")
        debug = run_attnx("--debug", "run", "-f", "json", "-o", str(target))
        assert debug.code == 1
        assert debug.stderr.splitlines() == [
            f"attnx: error: {target}: cannot write: No space left on device",
            "attnx: caused by OSError: [Errno 28] No space left on device",
        ]
        assert not target.exists() and not list(tmp_path.iterdir())

    def test_binary_to_terminal_is_refused(self) -> None:
        """npz to a terminal without --output is a usage error with a hint."""
        from attnx.cli.options import OutputFormat
        from attnx.cli.output import check_destination
        from attnx.environment import Environment, using
        from attnx.errors import UsageError

        class Terminal(io.StringIO):
            def isatty(self) -> bool:
                return True

        with using(Environment(stdout=Terminal())):
            with pytest.raises(UsageError, match="is binary; write it with --output FILE or redirect stdout"):
                check_destination(OutputFormat.npz, None)
            check_destination(OutputFormat.npz, "x.npz")  # a file is fine
            check_destination(OutputFormat.json, None)  # text is fine


class TestTerminals:
    """Colour and width follow the environment: a real pipe first, then the variables (in-process)."""

    def test_no_ansi_when_piped(self) -> None:
        """A real process piped to another program writes no ANSI escape."""
        proc = subprocess.run([*ATTNX, "run"], capture_output=True, text=True, env=subprocess_env(), check=True)
        assert ANSI not in proc.stdout and "0.3664" in proc.stdout

    def test_force_color_and_no_color(self) -> None:
        """FORCE_COLOR colours piped tables; NO_COLOR, --no-color and TERM=dumb win over it."""
        forced = run_attnx("run", env={"FORCE_COLOR": "1"})
        assert forced.code == 0 and ANSI in forced.stdout
        for env, extra in (
            ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, []),
            ({"FORCE_COLOR": "1"}, ["--no-color"]),
            ({"FORCE_COLOR": "1", "TERM": "dumb"}, []),
        ):
            outcome = run_attnx("run", *extra, env=env)
            assert outcome.code == 0 and "0.3664" in outcome.stdout
            assert ANSI not in outcome.stdout, (env, extra)

    @pytest.mark.parametrize(
        "args", [["run"], ["trace", "-t", "cat"], ["heads"], ["diff", "--heads", "1,2"]], ids=" ".join
    )
    def test_piped_lines_end_where_their_text_does(self, args: list[str]) -> None:
        """Piped tables carry no blanks after a line's text (Rich pads titles and last columns to the table's width)."""
        outcome = run_attnx(*args)
        assert outcome.code == 0 and outcome.stdout.count("\n") > 10
        assert [line for line in outcome.stdout.splitlines() if line.endswith(" ")] == []

    def test_files_of_tables_end_their_lines_too(self, tmp_path: Path) -> None:
        """A table written with --output, or saved with --export as text, has no trailing blanks either."""
        assert run_attnx("run", "-o", str(tmp_path / "run.txt"), "--export", str(tmp_path / "x.txt")).code == 2
        assert run_attnx("run", "-o", str(tmp_path / "run.txt")).code == 0
        assert run_attnx("heads", "--export", str(tmp_path / "heads.txt")).code == 0
        for name in ("run.txt", "heads.txt"):
            lines = (tmp_path / name).read_text("utf-8").splitlines()
            assert len(lines) > 10 and [line for line in lines if line.endswith(" ")] == []

    @pytest.mark.parametrize("columns", [50, 60, 120])
    def test_columns_sets_the_width(self, columns: int) -> None:
        """Piped tables follow COLUMNS: the widest line fills it, none passes it."""
        outcome = run_attnx("run", "-s", "output", env={"COLUMNS": str(columns)})
        assert outcome.code == 0
        widest = max(len(line) for line in outcome.stdout.splitlines())
        assert widest <= columns and (columns == 120 or widest == columns)


class TestPipesAndSignals:
    """What only a real process shows: a reader that goes away, Ctrl-C and SIGKILL."""

    def test_closed_pipe_is_quiet(self) -> None:
        """`attnx run --format csv | head -1` prints the CSV header alone and nothing on stderr."""
        header = run_attnx("run", "--seed", "1", "--tokens", "a b", "--format", "csv").stdout.splitlines()[0]
        proc = subprocess.run(
            f"{' '.join(ATTNX)} run --seed 1 --tokens \"{' '.join(map(str, range(100)))}\" --format csv | head -1",
            shell=True, capture_output=True, text=True, env=subprocess_env(),
        )  # fmt: skip
        assert header.startswith("tensor,head,") and proc.stdout == header + "\n"
        assert proc.stderr == ""

    def _reading_run(self, target: Path) -> subprocess.Popen:
        """`attnx run - --output TARGET`, once it is inside the command, reading stdin (which stays open).

        Writing 1 MiB into the pipe returns only once the process has read all but the pipe's buffer
        (64 KiB) of it: from then on it is in the command's read of stdin, whatever the machine's load.
        """
        # SIGINT back to its default in the child: a test run started in the background (`cmd &`)
        # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
        proc = subprocess.Popen(
            [*ATTNX, "run", "-", "--format", "csv", "--output", str(target)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(b" " * (1 << 20))
        proc.stdin.flush()
        assert proc.poll() is None
        return proc

    def test_ctrl_c_exits_130_and_keeps_the_old_file(self, tmp_path: Path) -> None:
        """SIGINT mid-run: exit 130, one line on stderr, the old file intact, no temp file left."""
        target = tmp_path / "out.csv"
        target.write_text("previous\n")
        proc = self._reading_run(target)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert err == b"attnx: error: interrupted\n"
        assert target.read_text() == "previous\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]

    def test_kill_keeps_the_old_file(self, tmp_path: Path) -> None:
        """SIGKILL mid-run: the old file is still whole."""
        target = tmp_path / "out.csv"
        target.write_text("previous\n")
        proc = self._reading_run(target)
        proc.kill()
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert target.read_text() == "previous\n"

    def test_interrupt_while_computing_keeps_the_old_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Ctrl-C during the computation itself (in-process): exit 130, one line, the old file intact."""
        import attnx.engines

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(attnx.engines, "compute", interrupted)
        target = tmp_path / "out.csv"
        target.write_text("previous\n")
        outcome = run_attnx("run", "--format", "csv", "--output", str(target))
        assert (outcome.code, outcome.stdout, outcome.stderr) == (130, "", "attnx: error: interrupted\n")
        assert target.read_text() == "previous\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


class TestExitCodesAndMessages:
    def test_help_documents_exit_codes(self) -> None:
        """--help lists the exit codes."""
        text = " ".join(invoke("--help").stdout.split())
        assert "0 success" in text and "2 bad usage or input" in text and "130 interrupted" in text

    def test_unexpected_error_is_one_line_and_exit_1(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A bug surfaces as one line with a --debug hint and exit 1, not a traceback; with --debug, as its traceback."""
        import attnx.engines

        def broken(*args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(attnx.engines, "compute", broken)
        result = run_attnx("run")
        assert (result.code, result.stdout) == (1, "")
        assert result.stderr == "attnx: error: unexpected RuntimeError: boom (re-run with --debug for the traceback)\n"
        debug = run_attnx("--debug", "run")
        assert (debug.code, debug.stdout) == (1, "")
        assert debug.stderr.startswith("Traceback (most recent call last):\n")
        assert debug.stderr.endswith("\nRuntimeError: boom\n") and "in broken" in debug.stderr

    def test_quiet_silences_warnings(self, tmp_path: Path) -> None:
        """-q drops the fully-masked warning; the data is unchanged."""
        path = tmp_path / "m.yaml"
        path.write_text("q: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\nmask: [[1, 1], [0, 0]]\n")
        loud = run_attnx("run", str(path), "-f", "json")
        quiet = run_attnx("run", str(path), "-f", "json", "-q")
        assert "warning" in loud.stderr and quiet.stderr == ""
        assert loud.stdout == quiet.stdout


class TestOutputPermissions:
    def test_new_file_follows_umask_and_replaced_file_keeps_its_mode(self, tmp_path: Path) -> None:
        """--output files get 0666 & ~umask when new, and keep their mode when replaced."""
        from attnx.io.output import atomic_write

        old = os.umask(0o022)
        try:
            atomic_write(tmp_path / "new.txt", b"x")
            assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
            kept = tmp_path / "kept.txt"
            kept.write_text("old")
            kept.chmod(0o600)
            atomic_write(kept, b"new")
            assert kept.stat().st_mode & 0o777 == 0o600 and kept.read_bytes() == b"new"
        finally:
            os.umask(old)

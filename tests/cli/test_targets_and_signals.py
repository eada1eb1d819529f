"""Output targets that are not plain new files, signals, closed streams and an untrusted terminal width."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_scripting import ATTNX, subprocess_env
from tests.runner import run_attnx

PY_ATTNX = "import sys; from attnx.console import main; sys.argv = ['attnx', *sys.argv[1:]]; "


def attnx_process(*args: str, code: str = "", cwd: Path | None = None, stdin: int | None = None):  # type: ignore[no-untyped-def]
    """Run attnx in a fresh process through its console entry, after ``code`` (a monkeypatch)."""
    return subprocess.run([sys.executable, "-c", code + PY_ATTNX + "main()", *args], capture_output=True,
                          text=True, env=subprocess_env(), cwd=cwd, stdin=stdin, timeout=120)  # fmt: skip


class TestOutputTargets:
    """-o and --export: never replace what is not a regular file, never write over an input."""

    def test_character_device_is_written_into(self) -> None:
        """-o /dev/null: the device stays a device (replacing it would destroy it, as root)."""
        assert run_attnx("run", "-f", "json", "-o", os.devnull).code == 0
        assert stat.S_ISCHR(os.stat(os.devnull).st_mode)

    def test_fifo_is_written_into(self, tmp_path: Path) -> None:
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
        assert run_attnx("run", "-f", "json", "-o", str(fifo)).code == 0
        out, _ = reader.communicate(timeout=30)
        assert out.startswith(b'{"format_version"') and stat.S_ISFIFO(os.stat(fifo).st_mode)

    def test_trailing_slash_names_a_folder(self, tmp_path: Path) -> None:
        out = run_attnx("run", "-f", "json", "-o", f"{tmp_path}/newdir/")
        assert out.code == 2 and "names a folder; give a file name" in out.stderr
        assert list(tmp_path.iterdir()) == []

    def test_longest_file_name(self, tmp_path: Path) -> None:
        """A 255-byte name (the usual limit): the temp name is short, so it works."""
        target = tmp_path / ("a" * 250 + ".json")
        assert run_attnx("run", "-f", "json", "-o", str(target)).code == 0
        assert target.read_text().startswith('{"format_version"') and len(list(tmp_path.iterdir())) == 1

    @pytest.mark.parametrize("flag", ["-o", "--export"])
    def test_an_input_is_never_written_over(self, tmp_path: Path, flag: str) -> None:
        """-o or --export naming the input file (or a link to it): exit 2, the input unchanged."""
        source = Path("configs/cat-sat-on-mat.yaml").read_text()
        path = tmp_path / "in.txt"  # a YAML input, named as an export may be
        path.write_text(source)
        (tmp_path / "link.txt").symlink_to(path)
        for target in (path, tmp_path / "link.txt"):
            args = ["-f", "json", "-o", str(target)] if flag == "-o" else ["--export", str(target)]
            out = run_attnx("run", str(path), *args)
            assert out.code == 2 and "is an input of this command" in out.stderr
        assert path.read_text() == source

    def test_input_protection_covers_every_input(self, tmp_path: Path) -> None:
        """diff's two sides and check's --against file are inputs too."""
        a = tmp_path / "a.json"
        assert run_attnx("run", "-f", "json", "-o", str(a)).code == 0
        kept = a.read_text()
        out = run_attnx("diff", str(a), "configs/cat-sat-on-mat.yaml", "-f", "json", "-o", str(a))
        assert out.code == 2 and a.read_text() == kept
        out = run_attnx("check", "configs/cat-sat-on-mat.yaml", "--against", str(a), "-f", "json", "-o", str(a))
        assert out.code == 2 and a.read_text() == kept

    def test_symlink_is_written_through(self, tmp_path: Path) -> None:
        """-o link.json -> real.json: real.json gets the output, the link stays a link."""
        real, link = tmp_path / "real.json", tmp_path / "link.json"
        real.write_text("old")
        link.symlink_to(real)
        assert run_attnx("run", "-f", "json", "-o", str(link)).code == 0
        assert link.is_symlink() and real.read_text().startswith('{"format_version"')
        assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


class TestSignals:
    """SIGTERM and SIGHUP end attnx as Ctrl-C does: quietly, with 128 + the signal, no temp file left."""

    @pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
    def test_signal_while_writing(self, tmp_path: Path, signum: int, code: int) -> None:
        """The signal arrives while the output's temp file is being written: it is removed, the old file kept."""
        target = tmp_path / "out.json"
        target.write_text("previous\n")
        patch = f"import os; real = os.fsync; os.fsync = lambda fd: (os.kill(os.getpid(), {int(signum)}), real(fd)); "
        proc = attnx_process("run", "-f", "json", "-o", str(target), code=patch)
        name = signal.Signals(signum).name
        assert (proc.returncode, proc.stdout, proc.stderr) == (code, "", f"attnx: terminated by {name}\n")
        assert target.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["out.json"]

    def test_ctrl_c_while_importing(self) -> None:
        """Ctrl-C before the CLI has loaded (here: while Typer is imported): exit 130, one line, no traceback."""
        patch = (
            "import builtins; real = builtins.__import__\n"
            "def slow(name, *a, **k):\n"
            "    if name == 'typer': raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = slow\n"
        )
        proc = attnx_process("run", code=patch)
        assert (proc.returncode, proc.stderr) == (130, "attnx: interrupted\n")

    def test_sigterm_from_outside(self) -> None:
        """A real SIGTERM while attnx reads stdin: 143 and one line."""
        proc = subprocess.Popen([*ATTNX, "run", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=subprocess_env())  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(b" " * (1 << 20))  # returns once attnx is reading stdin
        proc.stdin.flush()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and err == b"attnx: terminated by SIGTERM\n"


class TestStreams:
    """stdin closed, stdout closed early, COLUMNS of any value."""

    def test_closed_stdin(self) -> None:
        proc = subprocess.run(f"{' '.join(ATTNX)} run - <&-", shell=True, capture_output=True, text=True,
                              env=subprocess_env())  # fmt: skip
        assert (
            proc.returncode == 2
            and proc.stderr == "attnx: error: <stdin>: stdin is closed; pipe the input in, or give a file\n"
        )

    @pytest.mark.parametrize("args", [["run", "--help"], ["run"], ["run", "-f", "json"], ["--help"]])
    def test_reader_leaving_early_is_exit_0(self, args: list[str]) -> None:
        proc = subprocess.run(f"{' '.join(ATTNX)} {' '.join(args)} | head -c 1; exit ${{PIPESTATUS[0]}}",
                              shell=True, executable="/bin/bash", capture_output=True, text=True,
                              env=subprocess_env())  # fmt: skip
        assert (proc.returncode, proc.stderr) == (0, "")

    @pytest.mark.parametrize(
        ("columns", "warning"),
        [
            ("abc", "COLUMNS='abc' is not a terminal width; using the terminal's own"),
            ("0", "COLUMNS='0' is not a terminal width"),
            ("100000000", "COLUMNS=100000000 is outside 20-1000; using 1000"),
            ("5", "COLUMNS=5 is outside 20-1000; using 20"),
        ],
    )
    def test_columns_is_untrusted(self, columns: str, warning: str) -> None:
        """A width that is no width is replaced, a wild one clamped; either is said; the table still prints."""
        out = run_attnx("run", "--show", "weights", env={"COLUMNS": columns})
        assert out.code == 0 and warning in out.stderr and "weights" in out.stdout
        assert max(len(line) for line in out.stdout.splitlines()) <= 1000

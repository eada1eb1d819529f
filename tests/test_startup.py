"""Start-up imports: help and version import nothing heavy; a run imports only what its engine and input need."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# One fresh interpreter runs `attnx ARGS` for each ARGS in turn and prints, after each, the heavy
# modules imported so far (modules stay imported, so the first ARGS that imports one is the culprit).
PROBE = (
    "import json, sys\n"
    "from attnx.cli import main\n"
    "for args in {runs!r}:\n"
    "    sys.argv = ['attnx', *args]\n"
    "    try:\n"
    "        main()\n"
    "    except SystemExit:\n"
    "        pass\n"
    "    sys.stderr.write(json.dumps([m for m in {modules!r} if m in sys.modules]) + '\\n')\n"
)


HEAVY = ("torch", "numpy", "safetensors", "tokenizers")
HELP_AND_VERSION = (
    ["--help"], ["--version"], ["run", "--help"], ["trace", "--help"], ["check", "--help"], ["diff", "--help"],
    ["heads", "--help"], ["model", "--help"],
)  # fmt: skip


def heavy_modules_in_turn(*runs: list[str], modules: tuple[str, ...] = HEAVY) -> list[set[str]]:
    """For each run of one fresh process running `attnx ARGS` after `attnx ARGS`, the ``modules`` (by default the
    heavy ones) imported by then."""
    code = PROBE.format(runs=[list(args) for args in runs], modules=modules)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    seen = [set(json.loads(line)) for line in proc.stderr.splitlines() if line.startswith("[")]
    assert len(seen) == len(runs), proc.stderr
    return seen


def heavy_modules(*args: str) -> set[str]:
    """Which of torch, numpy, safetensors and tokenizers a fresh `attnx ARGS` process imported."""
    return heavy_modules_in_turn(list(args))[0]


class TestLazyImports:
    def test_help_and_version_import_nothing_heavy(self) -> None:
        """Help and version pay for neither torch, NumPy, safetensors nor tokenizers (all run in one fresh process)."""
        seen = heavy_modules_in_turn(*HELP_AND_VERSION)
        assert {" ".join(args): modules for args, modules in zip(HELP_AND_VERSION, seen, strict=True)} == {
            " ".join(args): set() for args in HELP_AND_VERSION
        }

    def test_the_probe_sees_a_later_import(self) -> None:
        """In one process, help then a NumPy run: the probe reports NumPy after the run, not before (so it can fail)."""
        assert heavy_modules_in_turn(["--help"], ["run", "--format", "json"]) == [set(), {"numpy"}]

    def test_numpy_engine_never_imports_torch(self) -> None:
        """A NumPy-engine run imports NumPy but not torch, nor the model libraries."""
        assert heavy_modules("run", "--format", "json") == {"numpy"}

    def test_models_run_without_torch(self, bert) -> None:
        """A model's forward pass on the NumPy engine reads the checkpoint with safetensors and tokenizers, never torch."""
        args = ("run", "--model", str(bert.path), "--text", "the cat", "--layer", "2", "--format", "json")
        assert heavy_modules(*args) == {"numpy", "safetensors", "tokenizers"}

    def test_torch_engine_imports_torch(self) -> None:
        """The probe can see torch when the torch engine runs (so the tests above can fail)."""
        pytest.importorskip("torch")
        assert "torch" in heavy_modules("run", "--engine", "torch", "--format", "json")


# One fresh process: `attnx --help` with Typer's help laid out as attnx imports it (attnx.cli.richhelp); then the
# same help with typer.rich_utils imported again as it is when its import takes a name the stand-ins lack (the real
# rich.markdown and rich.traceback); what each printed (in colour), the modules the first had imported, and what the
# stand-ins are once used.
HELP_PROBE = """\
import contextlib, io, json, os, sys
os.environ.update(FORCE_COLOR="1", COLUMNS="100")
from attnx.cli import COMMANDS, main, richhelp

def help_text():
    sys.argv = ["attnx", "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main()
    return out.getvalue()

light = help_text()
names = ("rich.markdown", "rich.traceback", "markdown_it", "pygments", *(f"attnx.cli.{c}" for c in COMMANDS))
imported = sorted(name for name in names if name in sys.modules)
import rich.markdown, rich.traceback, typer.rich_utils
stand_ins = typer.rich_utils.Markdown, typer.rich_utils.Traceback
made = type(stand_ins[0]("*x*")) is rich.markdown.Markdown
real = stand_ins[1].from_exception.__func__ is rich.traceback.Traceback.from_exception.__func__
for name in ("typer.rich_utils", "rich.markdown", "rich.traceback"):
    del sys.modules[name]
richhelp.STOOD_IN = {"rich.markdown": "Heading", "rich.traceback": "Traceback"}  # rich_utils takes Markdown
full = help_text()
fell_back = sys.modules["typer.rich_utils"].Markdown is sys.modules["rich.markdown"].Markdown
print(json.dumps({"imported": imported, "same": light == full, "colour": "\\x1b[" in light, "made": made,
                  "real": real, "fell_back": fell_back}))
"""


class TestWhatStartUpSkips:
    def test_a_table_run_imports_no_machine_format(self) -> None:
        """`attnx run` writing its table imports neither the machine formats (csv), nor secrets (for the temp name
        of an --output file), nor Typer's help; `--format csv` then imports csv."""
        modules = ("csv", "secrets", "attnx.render.formats", "typer.rich_utils")
        assert heavy_modules_in_turn(["run"], ["run", "-f", "csv"], modules=modules) == [
            set(),
            {"csv", "attnx.render.formats"},
        ]

    def test_app_help_imports_no_command_nor_markdown(self) -> None:
        """`attnx --help` imports no command's module and neither Rich's Markdown (markdown-it, Pygments) nor its
        traceback, and prints, in colour, exactly what it prints with them; the stand-ins Typer holds make and
        hand over to the real classes; a Typer that takes a name the stand-ins lack is imported as it is."""
        proc = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {
            "imported": [],
            "same": True,
            "colour": True,
            "made": True,
            "real": True,
            "fell_back": True,
        }

"""The workflows' package (attnx/workflows/__init__.py): each public name found in its module, loaded when first used."""

from __future__ import annotations

import importlib
import subprocess
import sys

import attnx.workflows as workflows


def test_every_name_is_its_modules() -> None:
    """Every name of ``__all__`` is the function of the module the package maps it to, and nothing else resolves."""
    for name in workflows.__all__:
        module = importlib.import_module(workflows._LAZY[name])
        assert getattr(workflows, name) is getattr(module, name)
        assert callable(getattr(workflows, name))
    assert sorted(workflows._LAZY) == sorted(workflows.__all__)
    assert not hasattr(workflows, "no_such_workflow")


def test_a_name_loads_its_module_alone() -> None:
    """Importing one workflow loads its own module and no other (a command pays for the workflow it runs)."""
    code = (
        "import sys\nfrom attnx.workflows import layer_spec\n"
        "print(sorted(m for m in sys.modules if m.startswith('attnx.workflows.')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "['attnx.workflows.layers']"

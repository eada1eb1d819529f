"""`attnx model`: what a local checkpoint holds (family, layers, heads, sizes, vocabulary, maximum length)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flags import CapFlags
from attnx.cli.options import (
    MaxBytesOpt,
    MaxDepthOpt,
    MaxDimensionOpt,
    MaxElementsOpt,
    MaxYamlBytesOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    ReportFormat,
    ReportFormatOpt,
)
from attnx.cli.output import emit

DirArg = Annotated[
    str,
    typer.Argument(metavar="DIR", help="A local checkpoint folder: config.json, model.safetensors, tokenizer.json.",
                   show_default=False),
]  # fmt: skip


@guarded
def model(
    path: DirArg,
    output_format: ReportFormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Describe a local Hugging Face style checkpoint: family, layers, heads, d_model, vocabulary, max length.

    Only config.json, the weights' header and tokenizer.json are read (within the input limits).
    Explore its heads with --model DIR --text "..." on run, trace, diff, heads and check.
    Layers and heads count from 0; heads --layer all shows every layer's heads (the model view).
    """
    caps = CapFlags.pick(locals())
    from attnx.models import describe
    from attnx.render import model as render
    from attnx.render.serialize import dumps

    info = describe(path, caps.limits())
    emit(
        output_format,
        {
            OutputFormat.table: lambda: render.info_view(info),
            OutputFormat.json: lambda: dumps(render.info_to_dict(info)),
        },
        output=output,
        no_color=no_color,
    )

"""`attnx model`: what a local checkpoint holds (family, layers, heads, sizes, vocabulary, maximum length; for a GGUF
file, its quantization too)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags
from attnx.cli.options import OutputFormat, ReportFormat, ReportFormatOpt
from attnx.cli.viewflags import OutputFlags

DirArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="A local checkpoint folder (config.json, model.safetensors, tokenizer.json), a GGUF file (or a folder "
        "holding one) or ollama:NAME[:TAG].",
    ),
]


@guarded
@grouped
def model(
    path: DirArg,
    *,
    output_format: ReportFormatOpt = ReportFormat.table,
    outputs: OutputFlags,
    caps: CapFlags,
) -> None:
    """Describe a local checkpoint folder or GGUF file: family, layers, heads, d_model, vocabulary, max length.

    Only config.json, the weights' header and tokenizer.json are read (within the input limits).
    Of a GGUF file, its metadata and each tensor's type and size: the quantization, in bits per weight.
    Explore its heads with --model DIR --text "..." on run, trace, diff, heads and check.
    Layers and heads count from 0; heads --layer all shows every layer's heads (the model view).
    """
    from attnx.models import describe
    from attnx.render import model as render
    from attnx.render.serialize import dumps

    info = describe(path, caps.limits())
    outputs.write(
        output_format,
        {
            OutputFormat.table: lambda: render.info_view(info),
            OutputFormat.json: lambda: dumps(render.info_to_dict(info)),
        },
    )

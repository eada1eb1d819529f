"""Write the corpus of malformed inputs that tests/cli/test_corpus.py runs through `attnx run`.

Run from anywhere: `python tests/corpus/make_corpus.py`. Every case is written next to this script,
with the fragment its one-line error must contain in expected.json. Files are regenerated
byte for byte: nothing here is random.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import warnings
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

HERE = Path(__file__).parent
KEEP = {"make_corpus.py", "expected.json"}

Q = "[[1.0, 0.0], [0.0, 1.0]]"
K = "[[1.0, 0.0], [0.0, 1.0]]"
V = "[[1.0, 2.0], [3.0, 4.0]]"
QKV = f"q: {Q}\nk: {K}\nv: {V}\n"
IDENTITY = "[[1.0, 0.0], [0.0, 1.0]]"
PROJECTED = f"x: {IDENTITY}\nw_q: {IDENTITY}\nw_k: {IDENTITY}\nw_v: {IDENTITY}\n"


CELL = {"q": "[[1.0, 0.0], [0.0, {}]]", "k": "[[1.0, 0.0], [0.0, {}]]", "v": "[[1.0, 2.0], [3.0, {}]]"}
CELL_DEFAULT = {"q": "1.0", "k": "1.0", "v": "4.0"}


def cell(value: str, key: str = "q") -> str:
    """The direct Q/K/V input with cell [1][1] of ``key`` replaced by ``value`` (YAML text)."""
    return "".join(
        f"{name}: {row.format(value if name == key else CELL_DEFAULT[name])}\n" for name, row in CELL.items()
    )


def json_cell(value: str) -> str:
    """The direct Q/K/V input as JSON with q[1][1] replaced by ``value`` (JSON text)."""
    return f'{{"q": [[1.0, 0.0], [0.0, {value}]], "k": {K}, "v": {V}}}'


def npy_bytes(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npy_claiming(shape: tuple[int, ...], descr: str = "<f8", data: bytes = b"", version: bytes = b"") -> bytes:
    """An .npy header claiming ``shape`` of ``descr``, then ``data`` whatever the header says."""
    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    raw = buffer.getvalue()
    return (raw[:6] + version + raw[8:] if version else raw) + data


def npy_header_of(length: int) -> bytes:
    """A format 2.0 .npy of a 2 × 2 float64 array whose header, padded with spaces, is ``length`` bytes long."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }"
    return b"\x93NUMPY\x02\x00" + length.to_bytes(4, "little") + header.ljust(length - 1).encode() + b"\n" + bytes(32)


def zipped(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", compression) as archive:
        warnings.simplefilter("ignore")  # one case repeats a member name on purpose
        for name, raw in members:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))  # fixed: the bytes never change
            info.compress_type = compression
            archive.writestr(info, raw)
    return buffer.getvalue()


def eye_members(**replace: bytes) -> list[tuple[str, bytes]]:
    members = {name: npy_bytes(np.eye(2)) for name in ("q", "k", "v")}
    members.update(replace)
    return [(f"{name}.npy", raw) for name, raw in members.items()]


def patched(raw: bytes, offset_field: int, value: bytes) -> bytes:
    """``raw`` (a one-member zip) with a field of both the local and the central header overwritten."""
    out = bytearray(raw)
    local, central = out.find(b"PK\x03\x04"), out.find(b"PK\x01\x02")
    out[local + offset_field : local + offset_field + len(value)] = value
    out[central + offset_field + 2 : central + offset_field + 2 + len(value)] = value
    return bytes(out)


class PickleTrap:
    """Unpickling this creates a file named PICKLE-RAN in the working directory."""

    def __reduce__(self):
        return (Path.touch, (Path("PICKLE-RAN"),))


def cases() -> dict[str, tuple[bytes | None, str]]:
    """name -> (content, fragment of the expected error). Content None is a directory."""
    laughs = ['a0: &a0 ["lol", "lol"]'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    # the same, inside one value: q's rows are anchors, each row ten aliases of the one before
    rows = ["&r0 [1.0, 1.0]"] + [f"&r{i} [{', '.join([f'*r{i - 1}'] * 10)}]" for i in range(1, 9)]
    chain = ["q: &c0 [[1.0]]"] + [f"c{i}: &c{i} [*c{i - 1}]" for i in range(1, 40)]  # one level more per alias
    huge_claim = npy_claiming((100_000, 100_000), data=b"\0" * 16)
    assert len(huge_claim) == 144
    pickled = npy_bytes(np.array([PickleTrap()], dtype=object), allow_pickle=True)
    # q and k at the element cap (16 Mi each), v a little more: 258 MiB in all, deflated to about 260 KB
    deflate_bombs = {name: npy_claiming(shape, data=bytes(math.prod(shape) * 8)) for name, shape in
                     (("q", (4096, 4096)), ("k", (4096, 4096)), ("v", (512, 4096)))}  # fmt: skip
    bzip2_bomb = npy_claiming((6400, 6144), data=bytes(300 * 1024 * 1024))  # 300 MiB in under 1 KiB
    one_member = zipped([("q.npy", npy_bytes(np.eye(2)))])
    cells = (65_536 - len("k: [[1.0]]\nv: [[1.0]]\nq: [[x]]\n")) // 2  # "1," each: the densest YAML there is
    dense = "k: [[1.0]]\nv: [[1.0]]\nq: [[" + "1," * cells + "x]]\n"
    text: dict[str, tuple[str, str]] = {
        # YAML aliases, nesting, syntax
        # aliases are accepted while what they expand to stays within the element and depth caps
        "yaml-alias-bomb.yaml": (
            "\n".join(laughs) + "\n",
            ":8:5: a value that YAML aliases expand to 31,111,111 nodes exceeds the element cap of 16,777,216 "
            "elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS",
        ),
        "yaml-alias-bomb-in-one-value.yaml": (
            f"q: [{', '.join(rows)}]\nk: {K}\nv: {V}\n",
            ":1:357: a value that YAML aliases expand to 31,111,111 nodes exceeds the element cap",
        ),
        "yaml-alias-deeper-than-the-cap.yaml": (
            "\n".join(chain) + "\n",
            ":30:12: through YAML alias *c28: level 33 of nesting exceeds the depth cap of 32 levels",
        ),
        "yaml-alias-in-itself.yaml": (
            f"q: &q [[1.0, 0.0], *q]\nk: {K}\nv: {V}\n",
            ":1:20: YAML alias *q is used inside the value it names",
        ),
        "yaml-alias-undefined.yaml": (f"q: {Q}\nk: *k\nv: {V}\n", ":2:4: invalid YAML: found undefined alias 'k'"),
        "yaml-alias-unknown-key.yaml": (f"base: &m {Q}\nq: *m\nk: {K}\nv: {V}\n", "base: unknown key"),
        "yaml-merge-key.yaml": (
            f"q: &m {Q}\nother:\n  <<: *m\nk: {K}\nv: {V}\n",
            ":3:3: merge keys (<<) are not accepted (YAML 1.2 has none)",
        ),
        "tokens-alias-to-a-matrix.yaml": (
            f"q: &m {Q}\ntokens: *m\nk: {K}\nv: {V}\n",
            "tokens[0]: expected a string, got a list",
        ),
        # 50,000 levels take more than the 64 KiB YAML cap; test_corpus.py also runs them with that cap raised
        "yaml-nested-50000-flow.yaml": (
            "q: " + "[" * 50_000 + "]" * 50_000 + "\n",
            "of YAML exceeds the YAML size cap",
        ),
        "yaml-nested-50000-block.yaml": ("q:\n" + "- " * 50_000 + "1\n", "of YAML exceeds the YAML size cap"),
        "yaml-nested-50000-mappings.yaml": ("a: {" * 50_000 + "}" * 50_000 + "\n", "of YAML exceeds the YAML size cap"),
        "yaml-nested-33.yaml": ("q: " + "[" * 32 + "1" + "]" * 32 + "\n", "level 33 of nesting exceeds the depth cap"),
        "yaml-dense-at-the-64-KiB-cap.yaml": (dense, f"q[0][{cells}]: expected a number, got text 'x'"),
        "yaml-over-the-64-KiB-cap.yaml": (
            QKV + "#" * 65_536 + "\n",
            "64.08 KiB of YAML exceeds the YAML size cap of 64 KiB; raise it with --max-yaml-bytes",
        ),
        "yaml-unclosed-bracket.yaml": (f"q: [[1.0, 0.0], [0.0, 1.0]\nk: {K}\nv: {V}\n", "invalid YAML"),
        "yaml-tab-indent.yaml": ("q:\n\t- [1.0]\n", "invalid YAML"),
        "yaml-bad-indent.yaml": ("q:\n  - [1.0]\n - [2.0]\n", "invalid YAML"),
        "yaml-two-documents.yaml": (
            f"{QKV}---\n{QKV}",
            ":4:1: invalid YAML: expected a single document in the stream, but found another document",
        ),
        "yaml-python-object-apply.yaml": (
            f"q: !!python/object/apply:pathlib.Path.touch [PYTHON-RAN]\nk: {K}\nv: {V}\n",
            "YAML tag 'tag:yaml.org,2002:python/object/apply:pathlib.Path.touch' is not accepted",
        ),
        "yaml-python-name.yaml": (
            f"q: !!python/name:os.system ''\nk: {K}\nv: {V}\n",
            ":1:4: YAML tag 'tag:yaml.org,2002:python/name:os.system' is not accepted",
        ),
        "yaml-local-tag.yaml": (
            f"q: !matrix {Q}\nk: {K}\nv: {V}\n",
            ":1:4: YAML tag '!matrix' is not accepted; write a plain list or mapping",
        ),
        "yaml-set-tag.yaml": (
            f"q: !!set {{a, b}}\nk: {K}\nv: {V}\n",
            "YAML tag 'tag:yaml.org,2002:set' is not accepted",
        ),
        # scalars resolve as in YAML 1.2's core schema: no binary, timestamps or yes/no booleans
        "yaml-binary-cell.yaml": (cell("!!binary aGVsbG8="), "YAML tag 'tag:yaml.org,2002:binary' is not accepted"),
        "yaml-timestamp-invalid.yaml": (cell("2001-02-30"), "q[1][1]: expected a number, got text '2001-02-30'"),
        "yaml-timestamp-tag.yaml": (cell("!!timestamp 2001-02-03"), "YAML tag 'tag:yaml.org,2002:timestamp' is not"),
        "yaml-bool-tag-maybe.yaml": (cell("!!bool maybe"), "cannot read 'maybe' as bool: expected true or false"),
        "yaml-bool-tag-yes.yaml": (cell("!!bool yes"), "cannot read 'yes' as bool: expected true or false"),
        "yaml-int-tag-text.yaml": (cell("!!int 1_000"), "cannot read '1_000' as int: expected a YAML 1.2 integer"),
        "yaml-hex-int-5000-digits.yaml": (cell("0x" + "f" * 5000), "as int: Exceeds the limit (4300 digits)"),
        "yaml-int-5000-digits.yaml": (cell("9" * 5000), "as int: Exceeds the limit (4300 digits)"),
        "yaml-int-400-digits.yaml": (
            cell("9" * 400),
            "q[1][1]: expected a finite number, got an integer of 400 digits",
        ),
        "yaml-nul-byte.yaml": (QKV + "\x00\n", "invalid YAML: character U+0000 is not allowed"),
        "yaml-bell-character.yaml": ("q: [[1.0\x07]]\n", "invalid YAML: character U+0007 is not allowed"),
        "yaml-top-level-list.yaml": ("- 1\n- 2\n", "expected a mapping of keys"),
        "yaml-top-level-scalar.yaml": ("just some text\n", "expected a mapping of keys"),
        "yaml-top-level-null.yaml": ("~\n", "expected a mapping of keys"),
        "yaml-comments-only.yaml": ("# nothing but a comment\n", "expected a mapping of keys"),
        "yaml-complex-key.yaml": (f"? [a, b]\n: 1\n{QKV}", ":1:3: keys must be strings, got a list"),
        "yaml-integer-key.yaml": (f"1: 2\n{QKV}", "keys must be strings, got 1"),
        "yaml-duplicate-key.yaml": (f"{QKV}q: {Q}\n", ":4:1: duplicate key 'q'"),
        "yaml-duplicate-key-quoted.yaml": (f"q: {Q}\n'q': {Q}\nk: {K}\nv: {V}\n", ":2:1: duplicate key 'q'"),
        "yaml-unknown-key.yaml": (f"{QKV}qq: 1\n", "qq: unknown key (did you mean 'q'?)"),
        "yaml-unknown-key-typo.yaml": (f"heds: 2\n{QKV}", "heds: unknown key (did you mean 'heads'?)"),
        # cells
        "cell-nan.yaml": (cell(".nan"), "q[1][1]: expected a finite number, got nan"),
        "cell-inf.yaml": (cell(".inf"), "q[1][1]: expected a finite number, got inf"),
        "cell-negative-inf.yaml": (cell("-.inf"), "q[1][1]: expected a finite number, got -inf"),
        "cell-nan-in-k.yaml": (cell(".NaN", "k"), "k[1][1]: expected a finite number, got nan"),
        "cell-nan-in-v.yaml": (cell(".nan", "v"), "v[1][1]: expected a finite number, got nan"),
        "cell-bool-yes.yaml": (cell("yes"), "q[1][1]: expected a number, got text 'yes'"),
        "cell-bool-true.yaml": (cell("true"), "q[1][1]: expected a number, got a boolean (true)"),
        "cell-bool-off.yaml": (cell("off"), "q[1][1]: expected a number, got text 'off'"),
        "cell-string.yaml": (cell("abc"), "q[1][1]: expected a number, got text 'abc'"),
        "cell-sexagesimal.yaml": (cell("1:30"), "q[1][1]: expected a number, got text '1:30'"),
        "cell-underscore-number.yaml": (cell("1_000"), "q[1][1]: expected a number, got text '1_000'"),
        "cell-quoted-number.yaml": (
            cell('"2.5"'),
            "q[1][1]: expected a number, got text '2.5' (a number in quotes is text: remove the quotes)",
        ),
        "cell-null.yaml": (cell("null"), "q[1][1]: expected a number, got nothing (null)"),
        "cell-list.yaml": (cell("[1.0]"), "q[1][1]: expected a number, got a list"),
        "cell-mapping.yaml": (cell("{a: 1}"), "q[1][1]: expected a number, got a mapping"),
        "cell-float-overflow.yaml": (cell("1.0e+400"), "q[1][1]: expected a finite number, got inf"),
        # shapes
        "shape-ragged-rows.yaml": (f"q: [[1.0, 0.0], [0.0]]\nk: {K}\nv: {V}\n", "q[1]: has 1 values but row 0 has 2"),
        "shape-ragged-k.yaml": (f"q: {Q}\nk: [[1.0, 0.0], [0.0, 1.0, 2.0]]\nv: {V}\n", "k[1]: has 3 values"),
        "shape-empty-matrix.yaml": (
            f"q: []\nk: {K}\nv: {V}\n",
            "q: expected a non-empty list of rows, got an empty list",
        ),
        "shape-empty-row.yaml": (f"q: [[]]\nk: {K}\nv: {V}\n", "q[0]: expected a non-empty list of numbers"),
        "shape-matrix-is-number.yaml": (f"q: 5\nk: {K}\nv: {V}\n", "q: expected a non-empty list of rows, got int 5"),
        "shape-matrix-is-text.yaml": (f"q: hello\nk: {K}\nv: {V}\n", "q: expected a non-empty list of rows, got text"),
        "shape-vector-not-matrix.yaml": (
            f"q: [1.0, 2.0]\nk: {K}\nv: {V}\n",
            "q[0]: expected a non-empty list of numbers",
        ),
        "shape-width-mismatch.yaml": (
            f"q: {Q}\nk: [[1.0, 0.0, 0.0]]\nv: [[1.0, 0.0, 0.0]]\n",
            "same number of columns",
        ),
        "shape-k-v-rows-differ.yaml": (f"q: {Q}\nk: {K}\nv: [[1.0, 2.0]]\n", "k and v must have the same shape"),
        "shape-d-model-mismatch.yaml": (f"d_model: 3\n{QKV}", "d_model: is 3 but q has 2 columns"),
        "heads-not-dividing.yaml": (f"heads: 3\n{QKV}", "d_model 2 is not divisible by heads 3"),
        "heads-zero.yaml": (f"heads: 0\n{QKV}", "heads: must be positive, got 0"),
        "heads-negative.yaml": (f"heads: -2\n{QKV}", "heads: must be positive, got -2"),
        "heads-float.yaml": (f"heads: 2.5\n{QKV}", "heads: expected a whole number, got float 2.5"),
        "heads-text.yaml": (f"heads: two\n{QKV}", "heads: expected a whole number, got text 'two'"),
        "heads-bool.yaml": (f"heads: true\n{QKV}", "heads: expected a whole number, got a boolean (true)"),
        "heads-yes.yaml": (f"heads: yes\n{QKV}", "heads: expected a whole number, got text 'yes'"),
        "heads-1e3.yaml": (f"heads: 1e3\n{QKV}", "heads: expected a whole number, got float 1000.0"),
        "kv-heads-not-dividing.yaml": (f"heads: 2\nkv_heads: 3\n{QKV}", "heads 2 is not divisible by kv_heads 3"),
        "tokens-count-mismatch.yaml": (f"tokens: [a, b, c]\n{QKV}", "tokens: 3 tokens given but there are 2 queries"),
        "tokens-bool.yaml": (f"tokens: [a, false]\n{QKV}", "tokens[1]: expected a string, got a boolean (false)"),
        "tokens-words-count-mismatch.yaml": (
            f"tokens: The cat sat\n{QKV}",
            "tokens: 3 tokens given but there are 2 queries",
        ),
        "tokens-words-escape-sequence.yaml": (
            f'tokens: "a \\e[31mred"\n{QKV}',
            "tokens: control character U+001B in the tokens",
        ),
        "tokens-blank-string.yaml": (f'tokens: " "\n{QKV}', "tokens: expected a non-empty list of strings or one"),
        "tokens-null.yaml": (f"tokens: [a, null]\n{QKV}", "tokens[1]: expected a string, got nothing (null)"),
        "tokens-escape-sequence.yaml": (f'tokens: ["\\e[31mred", b]\n{QKV}', "tokens[0]: control character U+001B"),
        "tokens-empty.yaml": (f"tokens: []\n{QKV}", "tokens: expected a non-empty list of strings"),
        "mask-wrong-shape.yaml": (f"mask: [[1, 0]]\n{QKV}", "mask: expected 'causal' or a 2 × 2 matrix"),
        "mask-value-two.yaml": (f"mask: [[1, 2], [1, 1]]\n{QKV}", "mask[0][1]: expected 0 or 1, got int 2"),
        "mask-unknown-word.yaml": (f"mask: diagonal\n{QKV}", "mask: expected 'causal' or a 2 × 2 matrix"),
        "padding-wrong-length.yaml": (f"padding: [0, 0, 1]\n{QKV}", "padding: expected 2 flags (0 or 1), got 3 values"),
        "scale-nan.yaml": (f"scale: .nan\n{QKV}", "scale: expected a number or one of sqrt_dk"),
        "scale-text.yaml": (f"scale: big\n{QKV}", "scale: expected a number or one of sqrt_dk"),
        "scale-integer-400-digits.yaml": (f"scale: {'9' * 400}\n{QKV}", "scale: expected a number or one of sqrt_dk"),
        "layout-unknown.yaml": (f"layout: diagonal\n{QKV}", "layout: expected one of contiguous, interleaved"),
        "version-2.yaml": (f"version: 2\n{QKV}", "unsupported input version 2"),
        "version-text.yaml": (f"version: one\n{QKV}", "unsupported input version 'one'"),
        "seed-and-q.yaml": (f"seed: 1\ntokens: [a, b]\n{QKV}", "give either the inputs or a seed"),
        "seed-without-tokens.yaml": ("seed: 1\n", "a seed needs tokens"),
        "seed-negative.yaml": ("seed: -1\ntokens: [a, b]\n", "seed: must be at least 0, got -1"),
        "seed-d-model-billion.yaml": (
            "seed: 1\ntokens: [a, b]\nd_model: 1000000000\n",
            "d_model: an axis of 1,000,000,000 exceeds the dimension cap of 1,048,576 per axis; raise it with --max-dimension",
        ),
        "seed-d-model-zero.yaml": ("seed: 1\ntokens: [a, b]\nd_model: 0\n", "d_model: must be positive, got 0"),
        "projection-x-without-w.yaml": (f"x: {IDENTITY}\nw_q: {IDENTITY}\n", "missing w_k, w_v"),
        "projection-w-q-wrong-rows.yaml": (
            f"x: {IDENTITY}\nw_q: [[1.0, 0.0]]\nw_k: {IDENTITY}\nw_v: {IDENTITY}\n",
            "w_q must have 2 rows",
        ),
        "projection-bias-wrong-length.yaml": (f"{PROJECTED}b_q: [1.0, 2.0, 3.0]\n", "b_q: has 3 values but w_q has 2"),
        "projection-bias-without-weight.yaml": (f"{QKV}b_o: [1.0, 2.0]\n", "b_o: a bias needs its weight w_o"),
        "projection-w-o-wrong-rows.yaml": (f"{QKV}w_o: [[1.0, 0.0]]\n", "w_o must have 2 rows"),
        "missing-v.yaml": (f"q: {Q}\nk: {K}\n", "missing v: give q, k and v"),
        "overflow-float64.yaml": (
            "q: [[1.0e+200]]\nk: [[1.0e+200]]\nv: [[1.0]]\n",
            "the score Q·K of query 't0' and key 't0' in head 0 overflows float64",
        ),
        "overflow-scale.yaml": (
            "scale: 1.0e+300\nq: [[1.0e+10]]\nk: [[1.0e+10]]\nv: [[1.0]]\n",
            "the scaled score of query 't0' and key 't0' in head 0 overflows float64",
        ),
        # JSON
        "json-trailing-comma.json": (
            f'{{"q": {Q}, "k": {K}, "v": {V},}}',
            ":1:94: invalid JSON: Expecting property name",
        ),
        "json-single-quotes.json": ("{'q': [[1.0]]}", ":1:2: invalid JSON: Expecting property name"),
        "json-comment.json": ('{"q": [[1.0]] // comment\n}', "invalid JSON: Expecting ',' delimiter"),
        "json-unterminated-string.json": ('{"tokens": ["a, "b"]}', "invalid JSON"),
        "json-nested-50000.json": ("[" * 50_000 + "]" * 50_000, "json-nested-50000.json:1:33: level 33 of nesting"),
        "json-nested-50000-objects.json": ('{"a": ' * 50_000 + "1" + "}" * 50_000, ":1:193: level 33 of nesting"),
        "json-nan-literal.json": (json_cell("NaN"), ":1:26: q[1][1]: expected a finite number, got nan"),
        "json-infinity-literal.json": (json_cell("Infinity"), ":1:26: q[1][1]: expected a finite number, got inf"),
        "json-negative-infinity.json": (json_cell("-Infinity"), "q[1][1]: expected a finite number, got -inf"),
        "json-1e400.json": (json_cell("1e400"), ":1:26: q[1][1]: expected a finite number, got inf"),
        "json-duplicate-key.json": (f'{{"q": {Q}, "k": {K}, "v": {V}, "q": {Q}}}', ":1:95: duplicate key 'q'"),
        "json-duplicate-key-escaped.json": (f'{{"q": {Q}, "\\u0071": {Q}}}', ":1:33: duplicate key 'q'"),
        "json-bool-cell.json": (json_cell("true"), ":1:26: q[1][1]: expected a number, got a boolean (true)"),
        "json-string-cell.json": (
            json_cell('"1.5"'),
            ":1:26: q[1][1]: expected a number, got text '1.5' (a number in quotes is text: remove the quotes)",
        ),
        "json-null-cell.json": (json_cell("null"), ":1:26: q[1][1]: expected a number, got nothing (null)"),
        "json-ragged.json": (f'{{"q": [[1.0, 0.0], [1.0]], "k": {K}, "v": {V}}}', ":1:20: q[1]: has 1 values"),
        "json-empty-matrix.json": (f'{{"q": [], "k": {K}, "v": {V}}}', ":1:7: q: expected a non-empty list of rows"),
        "json-top-level-array.json": (f"[{Q}]", "expected a mapping of keys"),
        "json-integer-5000-digits.json": (
            json_cell("9" * 5000),
            ":1:26: invalid JSON: Exceeds the limit (4300 digits)",
        ),
        "json-lone-surrogate-token.json": (
            f'{{"tokens": ["\\ud800", "b"], "q": {Q}, "k": {K}, "v": {V}}}',
            ":1:13: tokens[0]: control character U+D800",
        ),
        "json-unknown-key.json": (f'{{"q": {Q}, "k": {K}, "v": {V}, "extra": 1}}', ":1:95: extra: unknown key"),
        "json-mismatched-shapes.json": (f'{{"q": {Q}, "k": {K}, "v": [[1.0]]}}', "k and v must have the same shape"),
        "json-heads-not-dividing.json": (f'{{"heads": 3, "q": {Q}, "k": {K}, "v": {V}}}', "not divisible by heads 3"),
        "json-result-given-as-input.json": (
            '{"format_version": "1.1", "tokens": ["a"], "key_tokens": ["a"], "heads": 1, "weights": [[[1.0]]]}',
            "json-result-given-as-input.json: this is an attnx result (from `attnx run --format json`), not an input",
        ),
        "json-trace-output-given-as-input.json": (
            '{"format_version": "1.1", "token": "a", "query": 0}',
            "this is attnx output (JSON with format_version), not an input",
        ),
        # whole files
        "whitespace-only.yaml": ("  \n\t\n", "is empty, expected a YAML or JSON mapping"),
    }
    binary: dict[str, tuple[bytes | None, str]] = {
        "empty.yaml": (b"", "is empty, expected a YAML or JSON mapping"),
        "not-utf8-latin1.yaml": (
            "tokens: [café]\n".encode("latin-1") + QKV.encode(),
            "not UTF-8 text (byte 0xe9 at offset 12)",
        ),
        "not-utf8-utf16.yaml": (QKV.encode("utf-16"), "not UTF-8 text (byte 0xff at offset 0)"),
        "binary-garbage.yaml": (bytes(range(128, 256)) * 4, "not UTF-8 text (byte 0x80 at offset 0)"),
        "directory.yaml": (None, "is a directory, expected an input file"),
        # .npy: one array cannot be a whole input; refused unread
        "npy-claims-100000x100000-in-144-bytes.npy": (huge_claim, "a .npy file holds one array"),
        "npy-pickled.npy": (pickled, "a .npy file holds one array"),
        "npy-under-a-yaml-name.yaml": (npy_bytes(np.eye(2)), "a .npy file holds one array"),
        # .npz: each member's header is checked before its data is read
        "npz-member-claims-100000x100000-in-144-bytes.npz": (
            zipped(eye_members(q=huge_claim)),
            "q: the header claims a 100000 × 100000 float64 array (74.51 GiB) but the member holds 16 bytes of data",
        ),
        "npz-pickled-member.npz": (zipped(eye_members(q=pickled)), "q: holds pickled objects, which attnx never loads"),
        "npz-member-header-claims-4-GiB-in-13-bytes.npz": (
            zipped(eye_members(q=b"\x93NUMPY\x02\x00\xf0\xff\xff\xff{")),
            "q: not a valid .npy array: its header claims 4,294,967,280 bytes, but the file holds 13 bytes in all",
        ),
        "npz-member-claims-an-axis-of-10e309.npz": (
            zipped(eye_members(q=npy_claiming((10**309, 2)))),
            "q: the header claims a 10^309 × 2 float64 array (about 2^1030 bytes) but the member holds 0 bytes",
        ),
        "npz-member-claims-an-axis-of-10e309-with-data.npz": (
            zipped(eye_members(k=npy_claiming((2, 10**309), data=b"\0" * 64))),
            "k: the header claims a 2 × 10^309 float64 array",
        ),
        "npz-member-with-a-boolean-axis.npz": (
            zipped(eye_members(q=npy_claiming((True, 2), data=b"\0" * 16))),
            "q: the header claims an axis of True, not a whole number",
        ),
        "npz-member-with-40-axes.npz": (
            zipped(eye_members(q=npy_claiming((1,) * 40, data=b"\0" * 8))),
            "q: the header claims 40 axes; an array has at most 32",
        ),
        "npz-member-header-of-70000-bytes.npz": (
            zipped(eye_members(q=npy_header_of(70_000))),
            "q: not a valid .npy array: its header claims 70,000 bytes; at most 65,535 are read",
        ),
        "npz-zip-bomb-deflate-272-MiB.npz": (
            zipped(eye_members(**deflate_bombs), zipfile.ZIP_DEFLATED),
            "272 MiB of array data exceeds the input size cap of 256 MiB; raise it with --max-bytes or ATTNX_MAX_BYTES",
        ),
        "npz-zip-bomb-bzip2-300-MiB.npz": (
            zipped(eye_members(q=bzip2_bomb), zipfile.ZIP_BZIP2),
            "member 'q.npy' is compressed with bzip2, which zipfile inflates whole",
        ),
        "npz-complex-member.npz": (zipped(eye_members(q=npy_bytes(np.eye(2) + 1j))), "dtype complex128 holds neither"),
        "npz-structured-member.npz": (
            zipped(eye_members(q=npy_bytes(np.zeros(2, dtype=[("a", "<f8")])))),
            "holds neither booleans, numbers nor text",
        ),
        "npz-datetime-member.npz": (
            zipped(eye_members(q=npy_bytes(np.array(["2024-01-01"], dtype="datetime64[D]")))),
            "dtype datetime64[D] holds neither",
        ),
        "npz-format-3-member.npz": (
            zipped(eye_members(q=npy_claiming((2,), version=b"\x03\x00"))),
            ".npy format 3.0 is not read",
        ),
        "npz-negative-axis-member.npz": (
            zipped(eye_members(q=npy_claiming((-1, 2)))),
            "the header claims a negative axis",
        ),
        "npz-bad-magic-member.npz": (zipped(eye_members(q=b"NOTNUMPY" + bytes(64))), "not a valid .npy array"),
        "npz-truncated-member.npz": (zipped(eye_members(q=npy_bytes(np.eye(2))[:-8])), "but the member holds 24 bytes"),
        "npz-text-member.npz": (
            zipped([*eye_members(), ("notes.txt", b"hello")]),
            "member 'notes.txt' is not an .npy array",
        ),
        "npz-duplicate-members.npz": (
            zipped([*eye_members(), ("q.npy", npy_bytes(np.eye(2)))]),
            "duplicate key 'q' (two members named 'q.npy')",
        ),
        "npz-65-members.npz": (zipped([(f"m{i}.npy", b"") for i in range(65)]), "the archive lists 65 members"),
        "npz-truncated-archive.npz": (zipped(eye_members())[:-40], "cannot read as .npz"),
        "npz-not-a-zip.npz": (QKV.encode(), "cannot read as .npz: not a zip archive"),
        "npz-empty-archive.npz": (zipped([]), "missing q, k, v"),
        "npz-encrypted-member.npz": (
            patched(one_member, 6, b"\x01\x00"),
            "cannot read as .npz: a member is encrypted",
        ),
        "npz-unknown-compression.npz": (
            patched(one_member, 8, b"\x63\x00"),
            "member 'q.npy' is compressed with method 99",
        ),
        "npz-nan-member.npz": (
            zipped(eye_members(q=npy_bytes(np.array([[1.0, np.nan]])))),
            "q[0][1]: expected a finite number",
        ),
        "npz-bool-member.npz": (
            zipped(eye_members(q=npy_bytes(np.eye(2, dtype=bool)))),
            "expected an array of numbers, got dtype bool",
        ),
        "npz-3d-member.npz": (
            zipped(eye_members(q=npy_bytes(np.zeros((2, 2, 2))))),
            "q: expected a non-empty matrix, got shape (2, 2, 2)",
        ),
        "npz-0d-member.npz": (
            zipped(eye_members(q=npy_bytes(np.array(3.0)))),
            "q: expected a non-empty list of rows, got float 3.0",
        ),
        "npz-empty-member.npz": (
            zipped(eye_members(q=npy_bytes(np.zeros((0, 2))))),
            "q: expected a non-empty matrix, got shape (0, 2)",
        ),
        "npz-text-q-member.npz": (
            zipped(eye_members(q=npy_bytes(np.array(["a", "b"])))),
            "q[0]: expected a non-empty list of numbers",
        ),
    }
    corpus = {name: (content.encode("utf-8"), fragment) for name, (content, fragment) in text.items()}
    corpus.update(binary)
    return corpus


def main() -> None:
    corpus = cases()
    for path in HERE.iterdir():
        if path.name not in KEEP and path.name not in corpus and path.name != "__pycache__":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name, (content, _) in corpus.items():
        path = HERE / name
        if content is None:
            path.mkdir(exist_ok=True)
            (path / "README").write_text("A directory given where attnx expects an input file.\n")
        else:
            path.write_bytes(content)
    expected = {name: fragment for name, (_, fragment) in sorted(corpus.items())}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"{len(corpus)} malformed inputs in {HERE}")


if __name__ == "__main__":
    main()

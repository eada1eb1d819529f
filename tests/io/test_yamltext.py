"""Tests for attnx.io.yamltext: YAML 1.2 core-schema scalars, tags, merge keys and bounded aliases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnx.errors import AttnxError, ConfigError, InputError, LimitError
from attnx.io import yamltext
from attnx.io.documents import parse_document
from attnx.io.schema import spec_from_document
from attnx.limits import Limits

Q = "[[1.0, 0.5], [0.0, 2.0]]"


def value_of(scalar: str) -> object:
    """The Python value of ``scalar`` written as a plain YAML value."""
    return parse_document(f"a: {scalar}\n", "in.yaml").data["a"]


def laughs(levels: int = 10, base: str = '["lol", "lol"]') -> str:
    """A billion laughs: ``a0`` holds ``base``, each ``a{i}`` ten aliases of ``a{i-1}``."""
    lines = [f"a0: &a0 {base}"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


class TestCoreSchemaScalars:
    """Plain scalars resolve as YAML 1.2's core schema says, not as YAML 1.1 (PyYAML's default) does."""

    @pytest.mark.parametrize(
        ("scalar", "expected"),
        [
            # booleans: only true and false, in three spellings
            ("true", True),
            ("True", True),
            ("TRUE", True),
            ("false", False),
            ("False", False),
            ("FALSE", False),
            # YAML 1.1 booleans are text
            ("on", "on"),
            ("off", "off"),
            ("On", "On"),
            ("yes", "yes"),
            ("no", "no"),
            ("y", "y"),
            ("n", "n"),
            # null
            ("null", None),
            ("Null", None),
            ("NULL", None),
            ("~", None),
            ("", None),
            # integers: decimal (leading zeros too), 0o octal, 0x hexadecimal
            ("12", 12),
            ("-7", -7),
            ("+3", 3),
            ("012", 12),
            ("0o17", 15),
            ("0x1F", 31),
            ("0xff", 255),
            # floats: exponents without a dot, a leading dot, a trailing dot
            ("1e-3", 0.001),
            ("1e3", 1000.0),
            ("1E3", 1000.0),
            (".5", 0.5),
            ("-1.5E+2", -150.0),
            ("2.", 2.0),
            ("0.25", 0.25),
            (".inf", math.inf),
            ("+.Inf", math.inf),
            ("-.INF", -math.inf),
            # text: YAML 1.1 numbers and timestamps, 1.2 lookalikes
            ("1_000", "1_000"),
            ("1:30", "1:30"),
            ("0b101", "0b101"),
            ("-0x1F", "-0x1F"),
            ("0o8", "0o8"),
            ("2001-02-03", "2001-02-03"),
            ("2001-02-30", "2001-02-30"),
            ("1.2.3", "1.2.3"),
            ("e3", "e3"),
            ("inf", "inf"),
            ("nan", "nan"),
            ("NaN", "NaN"),
            ("=", "="),
            ("<<", "<<"),
        ],
    )
    def test_plain_scalar(self, scalar: str, expected: object) -> None:
        """Each plain scalar becomes the value and type the core schema gives it."""
        value = value_of(scalar)
        assert value == expected and type(value) is type(expected)

    @pytest.mark.parametrize("scalar", [".nan", ".NaN", ".NAN"])
    def test_nan(self, scalar: str) -> None:
        """The three spellings of .nan are NaN (then refused in matrices by the schema)."""
        value = value_of(scalar)
        assert isinstance(value, float) and math.isnan(value)

    def test_the_textbook_sentence_unquoted(self) -> None:
        """tokens: [The, cat, sat, on, mat] is five words, the fourth the word 'on'."""
        data = parse_document("tokens: [The, cat, sat, on, mat]\n", "in.yaml").data
        assert data["tokens"] == ["The", "cat", "sat", "on", "mat"]

    @pytest.mark.parametrize(
        ("scalar", "expected"),
        [
            ("!!str 12", "12"),
            ("!!str yes", "yes"),
            ("!!int 0x10", 16),
            ("!!int '42'", 42),
            ("!!float 1", 1.0),
            ("!!float '1e-3'", 0.001),
            ("!!bool 'true'", True),
            ("!!null ''", None),
            ("'1e3'", "1e3"),
            ('"true"', "true"),
        ],
    )
    def test_explicit_tags_and_quotes(self, scalar: str, expected: object) -> None:
        """Core-schema tags convert their text; quoted scalars stay text."""
        value = value_of(scalar)
        assert value == expected and type(value) is type(expected)


class TestRefusedValues:
    """Tags outside the core schema and values a tag cannot hold are one located line; nothing is executed."""

    @pytest.mark.parametrize(
        ("text", "kind", "message"),
        [
            ("q: !!bool maybe\n", InputError, "in.yaml:1:4: cannot read 'maybe' as bool: expected true or false"),
            ("q: !!bool yes\n", InputError, "in.yaml:1:4: cannot read 'yes' as bool: expected true or false"),
            ("q: !!int 1_000\n", InputError, "in.yaml:1:4: cannot read '1_000' as int: expected a YAML 1.2 integer"),
            ("q: !!float abc\n", InputError, "in.yaml:1:4: cannot read 'abc' as float: expected a YAML 1.2 float"),
            ("q: !!null x\n", InputError, "in.yaml:1:4: cannot read 'x' as null: expected null, Null, NULL or ~"),
            (
                "q: " + "9" * 5000 + "\n",
                InputError,
                "in.yaml:1:4: cannot read '99999999999999999...' as int: Exceeds the limit (4300 digits)",
            ),
            (
                "q: 0x" + "f" * 4000 + "\n",
                InputError,
                "in.yaml:1:4: cannot read '0xfffffffffffffff...' as int: Exceeds the limit (4300 digits)",
            ),
            ("q: !!timestamp 2001-02-03\n", ConfigError, "in.yaml:1:4: YAML tag 'tag:yaml.org,2002:timestamp' is not"),
            ("q: !!binary aGVsbG8=\n", ConfigError, "in.yaml:1:4: YAML tag 'tag:yaml.org,2002:binary' is not accepted"),
            ("q: !!python/name:os.system ''\n", ConfigError, "in.yaml:1:4: YAML tag 'tag:yaml.org,2002:python/name:"),
            (
                "q: !!python/object/apply:os.system [touch pwned]\n",
                ConfigError,
                "in.yaml:1:4: YAML tag 'tag:yaml.org,2002:python/",
            ),
            ("q: !!set {a, b}\n", ConfigError, "in.yaml:1:4: YAML tag 'tag:yaml.org,2002:set' is not accepted"),
            ("q: !local 1\n", ConfigError, "in.yaml:1:4: YAML tag '!local' is not accepted; write a plain number"),
            ("q: [1]\n\x07", InputError, "in.yaml:2:1: invalid YAML: character U+0007 is not allowed"),
        ],
    )
    def test_message(self, text: str, kind: type[AttnxError], message: str) -> None:
        """Each refused value gives one line that says where and why."""
        with pytest.raises(kind) as info:
            parse_document(text, "in.yaml")
        assert str(info.value).startswith(message)
        assert "\n" not in str(info.value)

    def test_merge_keys_are_refused(self) -> None:
        """A plain << key is a merge key YAML 1.2 does not have: refused where it is written."""
        with pytest.raises(
            ConfigError, match=r"^in\.yaml:3:3: merge keys \(<<\) are not accepted \(YAML 1\.2 has none\)"
        ):
            parse_document("a: &a {b: 1}\nc:\n  <<: *a\n", "in.yaml")

    def test_a_quoted_merge_key_is_text(self) -> None:
        """'<<' in quotes is an ordinary key."""
        assert parse_document("a: {'<<': 1}\n", "in.yaml").data == {"a": {"<<": 1}}

    def test_duplicate_keys_still_refused(self) -> None:
        """Two keys that resolve to the same text are a duplicate, wherever the second one is."""
        with pytest.raises(ConfigError, match=r"^in\.yaml:2:1: duplicate key 'on'$"):
            parse_document("on: 1\n'on': 2\n", "in.yaml")


class TestAliases:
    """Aliases are accepted while what they expand to stays within the element and depth caps."""

    def test_q_k_v_from_one_anchor(self) -> None:
        """q: &q ..., k: *q, v: *q gives the same spec as the matrix written out three times."""
        aliased = spec_from_document(parse_document(f"q: &q {Q}\nk: *q\nv: *q\n", "in.yaml"))
        written = spec_from_document(parse_document(f"q: {Q}\nk: {Q}\nv: {Q}\n", "in.yaml"))
        for name in ("q", "k", "v"):
            np.testing.assert_array_equal(getattr(aliased.inputs, name), getattr(written.inputs, name))
        np.testing.assert_array_equal(aliased.inputs.k, [[1.0, 0.5], [0.0, 2.0]])

    def test_scalar_and_row_aliases(self) -> None:
        """An alias may stand for a scalar or a row as well as a whole matrix."""
        data = parse_document("heads: &h 2\nkv_heads: *h\nq: [&r [1.0, 2.0], *r]\n", "in.yaml").data
        assert data == {"heads": 2, "kv_heads": 2, "q": [[1.0, 2.0], [1.0, 2.0]]}

    def test_bomb_refused_while_composing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A billion laughs is refused at the anchor whose expansion passes the element cap, before any value is built."""

        def never(*args: object) -> None:
            raise AssertionError("a value was built")

        monkeypatch.setattr(yamltext, "_to_python", never)
        with pytest.raises(LimitError) as info:
            parse_document(laughs(), "bomb.yaml")
        assert str(info.value) == (
            "bomb.yaml:8:5: a value that YAML aliases expand to 31,111,111 nodes exceeds the element cap of "
            "16,777,216 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS"
        )

    def test_bound_follows_the_element_cap(self) -> None:
        """Under --max-elements 100, a1 (31 nodes) passes and a2 (311 nodes) is refused, at line 3."""
        parse_document(laughs(2), "in.yaml", Limits(max_elements=100))
        with pytest.raises(LimitError, match=r"^in\.yaml:3:5: a value that YAML aliases expand to 311 nodes exceeds"):
            parse_document(laughs(3), "in.yaml", Limits(max_elements=100))

    def test_without_aliases_the_node_count_is_not_capped(self) -> None:
        """The expansion bound applies to aliases only: a written-out list of 200 values passes a cap of 100."""
        text = f"a: [{', '.join(['1'] * 200)}]\n"
        assert len(parse_document(text, "in.yaml", Limits(max_elements=100)).data["a"]) == 200

    def test_shared_values_are_built_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the cap raised past a billion laughs, each of its 32 written nodes is built once and shared."""
        calls = []
        original = yamltext._to_python

        def counting(node: object, loader: object) -> object:
            calls.append(node)
            return original(node, loader)  # type: ignore[arg-type]

        monkeypatch.setattr(yamltext, "_to_python", counting)
        data = parse_document(laughs(), "in.yaml", Limits(max_elements=10**10)).data
        assert data["a9"][0] is data["a9"][9] is data["a8"]
        assert len(calls) < 150  # 10 keys, 10 lists, 2 strings and 90 alias uses: not 3.1 billion nodes

    def test_alias_depth_counts_what_it_expands_to(self) -> None:
        """Each alias wrapping the last adds a level; level 33 is refused at the alias that reaches it."""
        chain = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 40)]
        with pytest.raises(LimitError) as info:
            parse_document("\n".join(chain) + "\n", "in.yaml")
        assert str(info.value) == (
            "in.yaml:31:12: through YAML alias *a29: level 33 of nesting exceeds the depth cap of 32 levels; "
            "raise it with --max-depth or ATTNX_MAX_DEPTH"
        )

    def test_alias_inside_its_own_value(self) -> None:
        """An alias to the value that contains it (a structure with no end) is refused, not followed."""
        with pytest.raises(ConfigError, match=r"^in\.yaml:1:13: YAML alias \*q is used inside the value it names"):
            parse_document("q: &q [[1], *q]\n", "in.yaml")

    def test_undefined_alias(self) -> None:
        """An alias to no anchor is invalid YAML, located."""
        with pytest.raises(InputError, match=r"^in\.yaml:1:4: invalid YAML: found undefined alias 'nowhere'"):
            parse_document("k: *nowhere\n", "in.yaml")

    def test_alias_in_tokens(self) -> None:
        """tokens aliased to a matrix: its first row is not a string."""
        text = f"q: &m {Q}\ntokens: *m\nk: {Q}\nv: {Q}\n"
        with pytest.raises(ConfigError, match=r"^in\.yaml:1:8: tokens\[0\]: expected a string, got a list$"):
            spec_from_document(parse_document(text, "in.yaml"))

    def test_errors_point_at_the_written_value(self) -> None:
        """A value reached through k: *q is located where q wrote it; the bad cell is reported at q, read first."""
        text = "q: &q [[1.0, x]]\nk: *q\nv: [[1.0, 1.0]]\n"
        doc = parse_document(text, "in.yaml")
        assert doc.where(("k", 0, 1)) == "in.yaml:1:14"
        with pytest.raises(ConfigError, match=r"^in\.yaml:1:14: q\[0\]\[1\]: expected a number, got text 'x'$"):
            spec_from_document(doc)

"""A GGUF file's tokenizer rebuilt from its metadata as a ``tokenizers.Tokenizer``, as transformers' GGUF loader
builds it (``AutoTokenizer.from_pretrained(folder, gguf_file=name)``), so both give the same tokens.

``tokenizer.ggml.model`` says which: ``gpt2`` is byte-level BPE over the token list and ``tokenizer.ggml.merges``,
split before merging by the regular expression ``tokenizer.ggml.pre`` names (GPT-2's own where it names none
transformers knows); ``llama`` is SentencePiece-style BPE with byte fallback, its merges given or rebuilt from the
tokens' scores, its spaces marked as the family's ``GgufForm`` says (``spaces``: Gemma's merges from the tokens'
order, Phi-3 marking spaces by a normalizer). Tokens the file marks as control
(type 3) are special, user-defined ones (type 4) whole; BOS and EOS are added as ``tokenizer.ggml.add_bos_token``
and ``add_eos_token`` say (a SentencePiece vocabulary adds BOS unless it says not to, as llama.cpp does).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnx.errors import ModelError
from attnx.models.gguf_file import Strings
from attnx.models.gguf_form import NORMALIZED, REPLACED
from attnx.models.tokenize import METASPACE, byte_decoder, native

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types
KINDS = {"gpt2": "BPE", "llama": "BPE"}  # tokenizer.ggml.model -> the tokenizers model it is built as

# The pre-tokenizers of tokenizer.ggml.pre that transformers knows, as the regular expressions that split text.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT4O_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano", "dbrx", "smaug-bpe"), LLAMA3_SPLIT),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"), QWEN2_SPLIT),
    "qwen35": QWEN35_SPLIT,
    "tekken": TEKKEN_SPLIT,
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), GPT4O_SPLIT),
}  # fmt: skip


@functools.cache
def byte_encoder() -> dict[int, str]:
    """GPT-2's byte alphabet: the printable character that stands for each byte."""
    return {byte: char for char, byte in byte_decoder().items()}


class Vocabulary:
    """The ``tokenizer.ggml.*`` keys of a GGUF file, checked: tokens, their types and scores, merges, special ids."""

    def __init__(self, metadata: Mapping[str, Any], path: Path) -> None:
        self.path, self.metadata = path, metadata
        self.model = self.text("tokenizer.ggml.model")
        self.tokens: list[str] = self.strings("tokenizer.ggml.tokens", required=True)
        self.types: list[int] = self.numbers("tokenizer.ggml.token_type", (int,))
        self.scores: list[float] = self.numbers("tokenizer.ggml.scores", (int, float))
        self.merges: list[str] = self.strings("tokenizer.ggml.merges")
        for key, values in (("token_type", self.types), ("scores", self.scores)):
            if values and len(values) != len(self.tokens):
                found = f"{len(values)} entries for {len(self.tokens)} tokens"
                raise ModelError(f"{path}: tokenizer.ggml.{key} has {found}")

    def text(self, key: str) -> str:
        """A string key (absent: empty)."""
        value = self.metadata.get(key, "")
        if not isinstance(value, str):
            raise ModelError(f"{self.path}: {key} must be a string, got {value!r:.40}")
        return value

    def strings(self, key: str, *, required: bool = False) -> list[str]:
        """A list of strings (absent: empty, unless ``required``)."""
        value = self.metadata.get(key)
        if value is None and not required:
            return []
        if isinstance(value, Strings):  # read from the header only now
            value = value.items()
        if not isinstance(value, list) or not value or not set(map(type, value)) <= {str}:
            raise ModelError(f"{self.path}: {key} must be a non-empty list of strings")
        return value

    def numbers(self, key: str, kinds: tuple[type, ...]) -> list[Any]:
        """A list of numbers (absent: empty)."""
        value = self.metadata.get(key) or []
        if not isinstance(value, list) or not set(map(type, value)) <= set(kinds):
            raise ModelError(f"{self.path}: {key} must be a list of numbers")
        return value

    def token(self, name: str) -> str | None:
        """The token of special id ``tokenizer.ggml.{name}_token_id`` (None: absent)."""
        key = f"tokenizer.ggml.{name}_token_id"
        index = self.metadata.get(key)
        if index is None:
            return None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.tokens):
            raise ModelError(f"{self.path}: {key} {index!r:.40} is not one of the {len(self.tokens)} tokens")
        return self.tokens[index]

    def flag(self, key: str, default: bool) -> bool:
        """A true-or-false key (absent: ``default``)."""
        value = self.metadata.get(key, default)
        if not isinstance(value, bool):
            raise ModelError(f"{self.path}: {key} must be true or false, got {value!r:.40}")
        return value

    def pairs(self) -> list[tuple[str, str]]:
        """``tokenizer.ggml.merges``, each two tokens separated by one space."""
        pairs = []
        for merge in self.merges:
            left, space, right = merge.partition(" ")
            if not space or " " in right:
                raise ModelError(f"{self.path}: tokenizer.ggml.merges holds {merge!r:.40}, not two tokens and a space")
            pairs.append((left, right))
        return pairs


def rebuilt_merges(vocab: Mapping[str, int], scores: Mapping[str, float] | None = None) -> list[tuple[str, str]]:
    """The merges a SentencePiece vocabulary implies: every split of a token into two tokens of the vocabulary,
    best-scored token first, ties by the lengths of the two parts, longest first, then by the tokens' order in
    ``scores`` (as transformers' ``generate_merges``); without ``scores``, each token's is minus its id (Gemma's:
    the vocabulary's order).

    A vocabulary of 262,144 tokens (Gemma's) has over a million splits: each is found by a hash of its two parts in
    NumPy (a part's hash is a slice of its token's running sums), and only the splits whose hashes are both among the
    vocabulary's are made as strings and checked against it, so a hash that collides costs a check, never a merge."""
    import numpy as np

    tokens = list(vocab if scores is None else scores)
    lengths = np.fromiter(map(len, tokens), dtype=np.intp, count=len(tokens))
    if not tokens or lengths.max() < 2:
        return []
    hashes = _Hashes(tokens, lengths)
    known = np.sort(hashes.whole() if scores is None or vocab.keys() == scores.keys() else _Hashes(list(vocab)).whole())
    splits = np.maximum(lengths - 1, 0)  # token k splits after each of its characters but the last
    owner = np.repeat(np.arange(len(tokens)), splits)
    cut = np.arange(owner.size) - np.repeat(np.cumsum(splits) - splits, splits) + 1  # the left part's length
    keep = _among(hashes.part(owner, 0, cut), known)
    owner, cut = owner[keep], cut[keep]
    keep = _among(hashes.part(owner, cut, lengths[owner]), known)
    owner, cut = owner[keep], cut[keep]
    ranks = vocab.values() if scores is None else scores.values()  # in the order of ``tokens``
    score = np.fromiter(ranks, dtype=np.float64, count=len(tokens))[owner] * (-1 if scores is None else 1)
    order = np.lexsort((owner, cut - lengths[owner], -cut, -score))  # the last key sorts first
    owners, cuts = owner[order].tolist(), cut[order].tolist()
    lefts = [tokens[k][:i] for k, i in zip(owners, cuts, strict=True)]
    rights = [tokens[k][i:] for k, i in zip(owners, cuts, strict=True)]
    pairs = list(zip(lefts, rights, strict=True))
    if all(map(vocab.__contains__, lefts)) and all(map(vocab.__contains__, rights)):
        return pairs
    return [(left, right) for left, right in pairs if left in vocab and right in vocab]  # a hash collided


class _Hashes:
    """Polynomial hashes modulo 2^64 of every substring of ``tokens``, from each character's running sum: the part
    ``[a, b)`` of token k hashes as ``sum(c[j] * B^(j - a))`` over its characters ``c`` (code points + 1)."""

    BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2^64

    def __init__(self, tokens: Sequence[str], lengths: Any = None) -> None:
        import numpy as np

        if lengths is None:
            lengths = np.fromiter(map(len, tokens), dtype=np.intp, count=len(tokens))
        points = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        self.ends = np.cumsum(lengths)
        self.starts = self.ends - lengths
        base, inverse = np.uint64(self.BASE), np.uint64(pow(self.BASE, -1, 1 << 64))
        self.sums = np.zeros(points.size + 1, dtype=np.uint64)
        self.inverses = np.ones(points.size + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):  # arithmetic modulo 2^64 wraps by design
            powers = np.ones(points.size, dtype=np.uint64)
            np.cumprod(np.full(max(points.size - 1, 0), base), out=powers[1:])
            np.cumsum((points.astype(np.uint64) + np.uint64(1)) * powers, out=self.sums[1:])
            np.cumprod(np.full(points.size, inverse), out=self.inverses[1:])

    def part(self, owner: Any, start: Any, stop: Any) -> Any:
        """The hash of characters ``start:stop`` of token ``owner`` (arrays of one length)."""
        import numpy as np

        first, last = self.starts[owner] + start, self.starts[owner] + stop
        with np.errstate(over="ignore"):
            return (self.sums[last] - self.sums[first]) * self.inverses[first]

    def whole(self) -> Any:
        """Each token's hash."""
        import numpy as np

        with np.errstate(over="ignore"):
            return (self.sums[self.ends] - self.sums[self.starts]) * self.inverses[self.starts]


def _among(values: Any, known: Any) -> Any:
    """Which of ``values`` are in the sorted array ``known`` (looked up in sorted order: the binary searches then
    walk ``known`` in order, a third quicker than in the order given)."""
    import numpy as np

    if not known.size:
        return np.zeros(values.shape, dtype=bool)
    order = np.argsort(values)
    ordered = values[order]
    found = np.empty(values.shape, dtype=bool)
    found[order] = known[np.minimum(np.searchsorted(known, ordered), known.size - 1)] == ordered
    return found


def byte_level(vocabulary: Vocabulary) -> Any:
    """GPT-2-style byte-level BPE: tokens in the byte alphabet (a token outside it respelled from its UTF-8 bytes),
    the file's merges, split by ``tokenizer.ggml.pre``'s expression where transformers knows it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    spelling = byte_encoder()
    alphabet = set(spelling.values())
    vocab = {
        token if set(token) <= alphabet else "".join(spelling[byte] for byte in token.encode("utf-8")): index
        for index, token in enumerate(vocabulary.tokens)
    }
    bpe = models.BPE(vocab, vocabulary.pairs(), dropout=None, continuing_subword_prefix="", end_of_word_suffix="",
                     fuse_unk=False)  # fmt: skip
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    split = SPLITS.get(vocabulary.text("tokenizer.ggml.pre"))
    if split is not None:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])  # fmt: skip
    return tokenizer


def sentencepiece(vocabulary: Vocabulary, spaces: str) -> Any:
    """SentencePiece-style BPE with byte fallback: ``▁`` for spaces, prepended to the first word (``spaces``, the
    family's ``GgufForm.spaces``: Gemma's replaced, none prepended; Phi-3's by a normalizer), merges given or rebuilt
    from the scores (Gemma's: from the order)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    replaced = spaces == REPLACED  # Gemma's
    tokens = vocabulary.tokens
    if replaced:  # a token of spaces only is stored as spaces; the tokenizer spells it with ▁
        tokens = [METASPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = dict(zip(tokens, range(len(tokens)), strict=True))  # a token held twice: its last id, first place
    if vocabulary.merges:
        merges = vocabulary.pairs()
    elif replaced:
        merges = rebuilt_merges(vocab)  # by the tokens' order
    else:
        if not vocabulary.scores:
            raise ModelError(f"{vocabulary.path}: a SentencePiece vocabulary needs tokenizer.ggml.scores or merges")
        merges = rebuilt_merges(vocab, dict(zip(tokens, vocabulary.scores, strict=True)))
    unk = {"unk_token": "<unk>"} if replaced else {}
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=True, byte_fallback=True, dropout=None, **unk))
    steps = [decoders.Replace(METASPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if replaced:
        tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
        tokenizer.normalizer = normalizers.Replace(" ", METASPACE)
    elif spaces == NORMALIZED:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(METASPACE),
                                                     normalizers.Replace(" ", METASPACE)])  # fmt: skip
        steps.append(decoders.Strip(content=" ", left=1))
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="first", split=False)
        steps.append(decoders.Strip(content=" ", left=1))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def add_specials(tokenizer: Any, vocabulary: Vocabulary, byte_level: bool, named: Sequence[str]) -> None:
    """Control tokens (in the byte alphabet, for a byte-level vocabulary) as special tokens, user-defined ones as
    whole tokens, then the named special tokens (BOS, EOS, UNK, PAD) not added yet."""
    from tokenizers import AddedToken

    alphabet = set(byte_encoder().values()) if byte_level else None
    types = vocabulary.types or [0] * len(vocabulary.tokens)
    control = [token for token, kind in zip(vocabulary.tokens, types, strict=True)
               if kind == CONTROL and (alphabet is None or set(token) <= alphabet)]  # fmt: skip
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in control])
    user = [token for token, kind in zip(vocabulary.tokens, types, strict=True)
            if kind == USER_DEFINED and tokenizer.token_to_id(token) is not None]  # fmt: skip
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False) for token in user])
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    rest = [token for token in dict.fromkeys(named) if token not in added]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in rest])


def kind(model: str, path: Path) -> str:
    """The kind of ``tokenizers`` model that ``tokenizer.ggml.model`` ``model`` is built as (``BPE``); one attnx does
    not build is a ModelError."""
    if model not in KINDS:
        raise ModelError(f"{path}: tokenizer.ggml.model {model!r:.40} is not supported (gpt2: byte-level BPE, llama: "
                         "SentencePiece-style BPE)")  # fmt: skip
    return KINDS[model]


def described(metadata: Mapping[str, Any], path: Path) -> tuple[str, int]:
    """The kind and vocabulary size of the tokenizer GGUF file ``path``'s metadata describes, without building it:
    the size is the count of ``tokenizer.ggml.tokens``, the special tokens among them."""
    model, tokens = metadata.get("tokenizer.ggml.model", ""), metadata.get("tokenizer.ggml.tokens")
    if not isinstance(model, str):
        raise ModelError(f"{path}: tokenizer.ggml.model must be a string, got {model!r:.40}")
    if not isinstance(tokens, (list, Strings)) or not tokens:
        raise ModelError(f"{path}: tokenizer.ggml.tokens must be a non-empty list of strings")
    return kind(model, path), len(tokens)


def build_tokenizer(metadata: Mapping[str, Any], path: Path, spaces: str) -> Any:
    """The tokenizer of GGUF file ``path`` from its metadata, a ``tokenizers.Tokenizer`` (``spaces``: its family's
    ``GgufForm.spaces``); what the native library refuses (a merge of tokens not in the vocabulary) is one ModelError
    line."""
    with uncollected():
        vocabulary = Vocabulary(metadata, path)
        with native(f"{path}: the tokenizer its metadata describes cannot be built"):
            return from_vocabulary(vocabulary, spaces)


@contextlib.contextmanager
def uncollected() -> Iterator[None]:
    """Python's cycle collector paused: a vocabulary is hundreds of thousands of new strings and pairs, none in a
    cycle, which it would otherwise scan again and again (a tenth of the time on Gemma's 262,144 tokens)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def from_vocabulary(vocabulary: Vocabulary, spaces: str) -> Any:
    """The tokenizer ``vocabulary`` describes (``spaces``: as ``sentencepiece``), with its special tokens and BOS/EOS
    template."""
    from tokenizers import processors

    kind(vocabulary.model, vocabulary.path)
    tokenizer = byte_level(vocabulary) if vocabulary.model == "gpt2" else sentencepiece(vocabulary, spaces)
    bos, eos = vocabulary.token("bos"), vocabulary.token("eos")
    named = [token for token in (bos, eos, vocabulary.token("unknown"), vocabulary.token("padding")) if token]
    add_specials(tokenizer, vocabulary, vocabulary.model == "gpt2", named)
    add_bos = vocabulary.flag("tokenizer.ggml.add_bos_token", vocabulary.model == "llama") and bos is not None
    add_eos = vocabulary.flag("tokenizer.ggml.add_eos_token", False) and eos is not None
    single = " ".join([*([f"{bos}:0"] if add_bos else []), "$A:0", *([f"{eos}:0"] if add_eos else [])])
    pair = " ".join([single, *([f"{bos}:1"] if add_bos else []), "$B:1", *([f"{eos}:1"] if add_eos else [])])
    specials = [(token, tokenizer.token_to_id(token)) for token, used in ((bos, add_bos), (eos, add_eos)) if used]
    tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
    return tokenizer

"""Render retrieved rows or memories for an LLM as untrusted evidence.

What the engine writes (markers, provenance labels) is kept apart from what it quotes (content):

- The markers are spec 000's, with a fresh random id per call, so content cannot forge the end
  marker::

      --- UNTRUSTED EVIDENCE START (id 3f9a0c1d2b4e5f60) ---
      [shared_notes row 3] Finding: X implies Y
      --- UNTRUSTED EVIDENCE END (id 3f9a0c1d2b4e5f60) ---

- Every quoted field is cleaned: invisible format characters (zero-width, bidi controls, Unicode
  tags, variation selectors, fillers) and control characters are removed, the text is
  NFKC-normalised, and every line break Unicode knows (``\r``, ``\v``, ``\f``, NEL, U+2028,
  U+2029 …) is a line break; a line that looks like a marker in any case, spacing or dash style
  loses the marker words; a line that opens with a chat role or a tool frame (``SYSTEM:``,
  ``assistant:``, ``Tool output:``, ``Observation:`` …) is relabelled as quoted; chat-template
  control tokens (``<|im_start|>``, ``[INST]``, ``<</SYS>>``, ``<start_of_turn>`` …) are
  removed; tags that open or close an evidence, document, tool-result or role wrapper
  (``</evidence>``, ``<system>`` …) lose their angle brackets; anything shaped like a provenance
  label is re-bracketed; continuation lines are indented so that no quoted line starts where the
  engine's lines start.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engramdb.errors import ValidationError
from engramdb.retrieval.budget import TokenCounter, approx_tokens, pack

START = "--- UNTRUSTED EVIDENCE START (id {nonce}) ---"
END = "--- UNTRUSTED EVIDENCE END (id {nonce}) ---"

# Every dash-like code point folds to '-' before matching (NFKC leaves most of them alone).
_DASHES = dict.fromkeys(
    [
        0x2010,
        0x2011,
        0x2012,
        0x2013,
        0x2014,
        0x2015,
        0x2212,
        0x2E3A,
        0x2E3B,
        0xFE58,
        0xFE63,
        0xFF0D,
        0x2500,
        0x2501,
        0x2796,
        0x23AF,
        0x2043,
        0x02D7,
        0x1680,
        0x058A,
        0x05BE,
        0x1400,
        0x1806,
        0x2E17,
        0x2E1A,
        0x301C,
        0x3030,
        0x30A0,
    ],
    ord("-"),
)
_MARKER = re.compile(r"untrusted[\W_]*evidence|evidence[\W_]*(?:start|end|begin)", re.IGNORECASE)
_RULE_LINE = re.compile(r"^\s*-{3,}")
_ROLE = re.compile(
    r"^[\W_]*(system|assistant|user|developer|human|ai|tool|function|model|instructions?|observation|"
    r"context|result|output|response)"
    r"(?:[\W_]*(?:output|result|response|call|message|prompt|instructions?|returned|says|reply))?[\W_]*(:|>)",
    re.IGNORECASE,
)
#: chat-template control tokens of common model families (ChatML, Llama 2/3, Gemma, Mistral, GPT)
_CONTROL_TOKEN = re.compile(
    r"<\|[^|<>\n]{0,40}\|>|<\s*/?\s*s\s*>|\[\s*/?\s*INST\s*\]|<<\s*/?\s*SYS\s*>>|"
    r"<\s*/?\s*(?:start|end)_of_turn\s*>|<\s*/?\s*(?:bos|eos|pad|unk|sep|cls)\s*>",
    re.IGNORECASE,
)
#: tags a wrapper around evidence, documents, tool results or chat turns might use
_WRAPPER_TAG = re.compile(
    r"<\s*(/?)\s*((?:untrusted[\w-]*|evidence|documents?|context|search_results?|results?|tool_(?:result|output|call|response)s?|"
    r"function_(?:results?|calls?|response)|retrieved[\w-]*|sources?|memory|memories|data|quote|"
    r"system|user|assistant|human|developer|instructions?|im_start|im_end)\b[^<>\n]{0,200}?)\s*(/?)>",
    re.IGNORECASE,
)
#: invisible characters that are not format (Cf) characters: variation selectors, the combining
#: grapheme joiner, Hangul fillers, the braille blank
_INVISIBLE = dict.fromkeys(
    [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), 0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800],
    None,
)
_LABEL = re.compile(r"\[([^\[\]\n]{0,80}?\b(?:row|memory|id)\b[^\[\]\n]{0,80}?)\]", re.IGNORECASE)


def _visible(ch: str) -> bool:
    cat = unicodedata.category(ch)
    if ch in "\n\t":
        return True
    # Cf: zero-width, bidi controls, tag characters; Cc: controls; Co/Cs/Cn: private, surrogate, unassigned.
    return cat not in ("Cf", "Cc", "Co", "Cs", "Cn")


def clean_text(text: str, *, single_line: bool = False) -> str:
    """Normalise untrusted text for rendering: NFKC, no invisible or control characters.

    With `single_line`, line breaks and tabs become spaces (for titles, tags and other fields).
    """
    text = unicodedata.normalize("NFKC", str(text))
    # isprintable() is False for every Cf/Cc/Co/Cs/Cn character (and for separators other than
    # the space), so the per-character filter runs only on text that needs it.
    if not text.replace("\n", "").replace("\t", "").isprintable():
        # Every line break Unicode knows becomes "\n" first, so a role line after U+2028 or a
        # bare "\r" is seen at the start of its line (and "\r", "\v" are not simply dropped).
        text = "\n".join(text.splitlines())
        text = "".join(ch for ch in text if _visible(ch))
    text = text.translate(_INVISIBLE).translate(_DASHES)
    text = text.replace("\t", " ")
    if single_line:
        text = " ".join(text.split())
    return text


def _neutralise_line(line: str) -> str:
    if "<" in line or "[" in line:
        line = _CONTROL_TOKEN.sub("(control token removed)", line)
        line = _WRAPPER_TAG.sub(lambda m: f"‹{m.group(1)}{m.group(2)}{m.group(3)}›", line)
    if _MARKER.search(line):
        line = _MARKER.sub("[marker text removed]", line)
    if _RULE_LINE.match(line):
        line = "(quoted) " + line.strip()
    m = _ROLE.match(line)
    if m:
        line = f"(quoted {m.group(1).lower()} label) " + line[m.end() :].lstrip()
    return _LABEL.sub(lambda mm: "(" + mm.group(1) + ")", line)


def quote_body(text: str) -> str:
    """Clean and neutralise a multi-line untrusted body; continuation lines are indented."""
    lines = [_neutralise_line(ln) for ln in clean_text(text).split("\n")]
    lines = [ln for ln in lines if ln.strip()] or [""]
    return "\n    ".join(ln.strip() for ln in lines)


def quote_field(text: str) -> str:
    """Clean and neutralise a one-line untrusted field (title, tag, column value)."""
    return _neutralise_line(clean_text(text, single_line=True))


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One piece of evidence: an engine-written label and untrusted content.

    `label` is provenance the engine writes (``"shared_notes row 3"``); it is still cleaned, since
    parts of it (a table name, a title) may come from callers. `fields` are extra untrusted
    ``(name, value)`` pairs rendered after the body.
    """

    label: str
    body: str
    fields: Sequence[tuple[str, str]] = field(default_factory=tuple)

    def render(self) -> str:
        label = clean_text(self.label, single_line=True).replace("[", "(").replace("]", ")")
        extra = "".join(f" | {quote_field(k)}: {quote_field(v)}" for k, v in self.fields)
        return f"[{label}] {quote_body(self.body)}{extra}"


def new_nonce() -> str:
    """A fresh 64-bit random marker id."""
    return secrets.token_hex(8)


def render_evidence(
    items: Sequence[EvidenceItem],
    token_budget: int,
    count: TokenCounter = approx_tokens,
    *,
    nonce: str | None = None,
) -> str:
    """Wrap `items`, best first, in nonce'd markers, keeping the whole text within `token_budget`.

    Returns ``""`` when nothing fits (or there is nothing to show).
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ValidationError(f"items must be a list of EvidenceItem, got {type(items).__name__}")
    items = list(items)
    if any(not isinstance(it, EvidenceItem) for it in items):
        raise ValidationError("items must be EvidenceItem values (see MemoryRetriever.retrieve)")
    if isinstance(token_budget, bool) or not isinstance(token_budget, int):
        raise ValidationError(f"token_budget must be a whole number of tokens, got {token_budget!r}")
    if not callable(count):
        raise ValidationError(f"count must be a callable text -> tokens, got {type(count).__name__}")
    if nonce is not None and not isinstance(nonce, str):
        raise ValidationError(f"nonce must be a str (or None for a fresh one), got {nonce!r}")
    nonce = nonce or new_nonce()
    text, _ = pack(
        [it.render() for it in items],
        token_budget,
        count,
        header=START.format(nonce=nonce),
        footer=END.format(nonce=nonce),
    )
    return text

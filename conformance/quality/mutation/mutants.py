"""The mutation operators: from a lexed C++ file, every one-token change the script may make
(operator swaps, constants, offsets, comparisons, removed negations), in a deterministic order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from cpp_lexer import (KEYWORDS_NOT_OPERAND, RE_FLOAT, RE_INT, Token, _binary_spacing_ok, _operand_end,
                       _string_context, lex)


@dataclass
class Candidate:
    file: str
    line: int
    col: int
    offset: int
    operator: str
    original: str
    replacement: str

    @property
    def id(self) -> str:
        return "%s:%d:%d:%s:%s" % (self.file, self.line, self.col, self.operator,
                                   self.replacement if self.replacement else "<removed>")

    def apply(self, text: str) -> str:
        end = self.offset + len(self.original)
        if text[self.offset:end] != self.original:
            raise RuntimeError("%s: expected %r at line %d col %d, found %r"
                               % (self.file, self.original, self.line, self.col, text[self.offset:end]))
        return text[:self.offset] + self.replacement + text[end:]


SWAPS = {
    # operator name, {token: replacement}
    "arithmetic": {"+": "-", "-": "+", "*": "/", "/": "*", "+=": "-=", "-=": "+=", "*=": "/=", "/=": "*="},
    "comparison": {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="},
    "logical": {"&&": "||", "||": "&&", "&": "|", "|": "&"},
}


def _format_float(value: float, suffix: str) -> str:
    s = repr(float(value))
    if "inf" in s or "nan" in s:
        return ""
    if "e" not in s and "." not in s:
        s += ".0"
    return s + suffix


def _number_mutations(tok: Token, prev: Optional[Token], prev_is_binary: bool, prev_is_unary_minus: bool,
                      call: Optional[str], float_factor: float) -> List[Tuple[str, str]]:
    text = tok.text
    out: List[Tuple[str, str]] = []
    m = RE_INT.match(text)
    if m and not ("." in text) and not (text[:2].lower() != "0x" and re.search(r"[eE]", text)):
        body, suffix = m.group(1), m.group(2)
        clean = body.replace("'", "")
        if clean.lower().startswith("0x"):
            v, fmt = int(clean, 16), (lambda x: hex(x))
        elif clean.lower().startswith("0b"):
            v, fmt = int(clean[2:], 2), (lambda x: bin(x))
        elif len(clean) > 1 and clean.startswith("0"):
            return out  # octal: leave alone
        else:
            v, fmt = int(clean), str
        binary_offset = prev is not None and prev.text in ("+", "-") and prev_is_binary
        if v == 0:
            out.append(("constant", fmt(1) + suffix))
        elif v == 1:
            out.append(("constant", fmt(0) + suffix))
            if binary_offset:
                out.append(("offset", fmt(2) + suffix))
        else:
            out.append(("constant", fmt(v + 1) + suffix))
        return out
    m = RE_FLOAT.match(text)
    if m and ("." in text or m.group(2)) and not text.lower().startswith("0x"):
        mant, exp, suffix = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float((mant + exp).replace("'", ""))
        except ValueError:
            return out
        if v == 0.0:
            r = _format_float(1.0, suffix)
        else:
            r = _format_float(v * float_factor, suffix)
        if r and r != text:
            out.append(("float_constant", r))
        if call is not None and re.search(r"pow|exp", call) and v != 0.0 and not prev_is_unary_minus:
            out.append(("sign_flip", "-" + text))
        return out
    return out


def _enclosing_call(tokens: List[Token], i: int) -> Optional[str]:
    """The name of the function whose argument list holds tokens[i], if any."""
    d = tokens[i].depth
    for j in range(i - 1, -1, -1):
        u = tokens[j]
        if u.depth < d:
            if u.text == "(" and j > 0 and tokens[j - 1].kind == "id":
                return tokens[j - 1].text
            return None
    return None


def candidates_for(path: str, text: str, float_factor: float = 2.0,
                   include_messages: bool = False) -> List[Candidate]:
    tokens = lex(text)
    out: List[Candidate] = []

    def add(t: Token, op: str, repl: str) -> None:
        out.append(Candidate(path, t.line, t.col, t.start, op, t.text, repl))

    for i, t in enumerate(tokens):
        if t.in_template or (t.in_message and not include_messages):
            continue
        prev = tokens[i - 1] if i > 0 else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if prev is not None and prev.kind == "id" and prev.text == "operator":
            continue
        if t.kind == "id" and t.text in ("true", "false"):
            add(t, "boolean", "false" if t.text == "true" else "true")
            continue
        if t.kind == "num":
            before_prev = tokens[i - 2] if i > 1 else None
            prev_binary = prev is not None and prev.text in ("+", "-") and _operand_end(before_prev)
            prev_unary_minus = prev is not None and prev.text == "-" and not _operand_end(before_prev)
            for op, repl in _number_mutations(t, prev, prev_binary, prev_unary_minus, _enclosing_call(tokens, i),
                                              float_factor):
                add(t, op, repl)
            continue
        if t.kind != "punct":
            continue
        s = t.text
        binary = _operand_end(prev) and _binary_spacing_ok(t)
        if s in ("+", "-"):
            if binary:
                if not _string_context(tokens, i):
                    add(t, "arithmetic", SWAPS["arithmetic"][s])
            elif s == "-" and not _operand_end(prev) and nxt is not None and (
                    nxt.kind in ("id", "num") or nxt.text == "(") and not t.ws_after:
                add(t, "unary_minus", "")
        elif s in ("*", "/"):
            if binary and not (prev.kind == "id" and prev.text in KEYWORDS_NOT_OPERAND):
                add(t, "arithmetic", SWAPS["arithmetic"][s])
        elif s in ("+=", "-=", "*=", "/="):
            if not _string_context(tokens, i) or s in ("*=", "/="):
                add(t, "arithmetic", SWAPS["arithmetic"][s])
        elif s in ("<", "<=", ">", ">=", "==", "!="):
            if _operand_end(prev) or prev is not None and prev.kind == "punct" and prev.text in (")", "]"):
                add(t, "comparison", SWAPS["comparison"][s])
        elif s in ("&&", "||"):
            if binary and t.ws_before:
                add(t, "logical", SWAPS["logical"][s])
        elif s in ("&", "|"):
            if binary and t.ws_before and nxt is not None and (nxt.kind in ("id", "num") or nxt.text in ("(", "!")):
                add(t, "logical", SWAPS["logical"][s])
        elif s == "!":
            if nxt is not None and (nxt.kind == "id" or nxt.text in ("(", "!")) and not _operand_end(prev):
                add(t, "negation", "")
    # Deterministic order: position, then operator and replacement.
    out.sort(key=lambda c: (c.offset, c.operator, c.replacement))
    return out

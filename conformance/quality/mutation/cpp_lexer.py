"""A small C++ lexer for the mutation script: enough to tell code from comments, strings and
preprocessor lines, and to find operator tokens with their neighbours (is this '-' binary or unary,
is this '<' a comparison or a template bracket, is this '+' a string concatenation)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple


PUNCTUATORS = sorted(
    """>>= <<= <=> ->* ... :: -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= .*
       { } [ ] ( ) ; : ? , . + - * / % ^ & | ~ ! = < > #""".split(),
    key=len, reverse=True)

KEYWORDS_NOT_OPERAND = {
    # A token after which '-', '+', '*', '&', '!' start an operand rather than join two.
    "return", "case", "throw", "else", "do", "new", "delete", "co_return", "co_yield", "co_await",
    "sizeof", "alignof", "decltype", "typeid", "noexcept", "static_assert",
    # Type keywords: '*' and '&' after them declare pointers and references.
    "const", "volatile", "auto", "void", "char", "bool", "short", "int", "long", "float", "double",
    "unsigned", "signed", "struct", "class", "typename", "enum", "union", "constexpr", "static",
    "inline", "extern", "mutable", "register", "thread_local", "operator", "template", "using",
    "namespace", "if", "while", "for", "switch", "and", "or", "not",
}

STRINGISH_IDS = {"to_string", "string", "str", "dump", "c_str", "join", "string_view", "ostringstream",
                 "what", "format"}
# Calls whose whole argument list is an error message (safetensors.cpp: [[noreturn]] fail(path, problem)),
# or a compile-time assertion that a mutation can only break the build of.
MESSAGE_CALLS = {"fail", "static_assert"}
MESSAGE_MACROS = {"TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "TORCH_WARN", "AT_ERROR", "TORCH_CHECK_VALUE",
                  "TORCH_CHECK_INDEX", "TORCH_CHECK_TYPE"}

RE_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RE_PPNUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z]|[0-9A-Za-z_.])*")
RE_INT = re.compile(r"^(0[xX][0-9a-fA-F']+|0[bB][01']+|[0-9][0-9']*)([uUlLzZ]*)$")
RE_FLOAT = re.compile(r"^((?:[0-9][0-9']*)?\.?(?:[0-9][0-9']*)?)([eE][+-]?[0-9]+)?([fFlL]?)$")


@dataclass
class Token:
    kind: str  # id, num, str, chr, punct
    text: str
    start: int  # offset in the file's text
    line: int  # 1-based
    col: int  # 1-based
    ws_before: bool = False
    ws_after: bool = False
    in_template: bool = False  # inside (or delimiting) a template argument list
    in_message: bool = False  # part of an error message (throw ...; TORCH_CHECK's message args)
    depth: int = 0  # bracket nesting depth of the token


class LexError(Exception):
    pass


def lex(text: str) -> List[Token]:
    tokens: List[Token] = []
    i, n = 0, len(text)
    line_starts = [0]
    for m in re.finditer("\n", text):
        line_starts.append(m.end())

    def line_col(off: int) -> Tuple[int, int]:
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= off:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, off - line_starts[lo] + 1

    at_line_start = True  # only whitespace since the last newline
    ws = True
    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start, ws = True, True
            i += 1
            continue
        if c in " \t\r\f\v":
            ws = True
            i += 1
            continue
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":  # line splice
            i += 2
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            ws = True
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise LexError("unterminated comment")
            i = j + 2
            ws = True
            continue
        if c == "#" and at_line_start:  # preprocessor directive, with its continuation lines
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    j = n
                    break
                if text[k - 1] == "\\":
                    j = k + 1
                    continue
                j = k
                break
            i = j
            ws = True
            continue
        at_line_start = False
        start = i
        kind = None
        m = RE_IDENT.match(text, i)
        if m:
            word = m.group(0)
            nxt = text[m.end()] if m.end() < n else ""
            if nxt == '"' and word in ("R", "u8R", "uR", "UR", "LR"):
                m2 = re.compile(r'"([^()\\ \t\n]{0,16})\(').match(text, m.end())
                if not m2:
                    raise LexError("bad raw string at offset %d" % i)
                close = ")" + m2.group(1) + '"'
                j = text.find(close, m2.end())
                if j < 0:
                    raise LexError("unterminated raw string")
                i, kind = j + len(close), "str"
            elif nxt in "\"'" and word in ("u8", "u", "U", "L"):
                i, kind = _skip_quoted(text, m.end()), ("str" if nxt == '"' else "chr")
            else:
                i, kind = m.end(), "id"
        elif c == '"':
            i, kind = _skip_quoted(text, i), "str"
        elif c == "'":
            i, kind = _skip_quoted(text, i), "chr"
        else:
            m = RE_PPNUMBER.match(text, i)
            if m:
                i, kind = m.end(), "num"
            else:
                for p in PUNCTUATORS:
                    if text.startswith(p, i):
                        i, kind = i + len(p), "punct"
                        break
                else:
                    i, kind = i + 1, "punct"  # stray character (e.g. '@', '$', '`')
        line, col = line_col(start)
        tokens.append(Token(kind, text[start:i], start, line, col, ws_before=ws))
        ws = False
    for a, b in zip(tokens, tokens[1:]):
        a.ws_after = b.ws_before or text[a.start + len(a.text):b.start] != ""
    if tokens:
        tokens[-1].ws_after = True
    _mark_depth(tokens)
    _mark_templates(tokens)
    _mark_messages(tokens)
    return tokens


def _skip_quoted(text: str, i: int) -> int:
    q = text[i]
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == q:
            return j + 1
        if text[j] == "\n":
            raise LexError("newline in literal at offset %d" % i)
        j += 1
    raise LexError("unterminated literal")


def _mark_depth(tokens: List[Token]) -> None:
    d = 0
    for t in tokens:
        if t.kind == "punct" and t.text in ")]}":
            d = max(0, d - 1)
        t.depth = d
        if t.kind == "punct" and t.text in "([{":
            d += 1


TEMPLATE_ARG_OK = {"::", ",", "*", "&", "...", "(", ")", "[", "]"}


def _mark_templates(tokens: List[Token]) -> None:
    """Marks '<' ... '>' that delimit template arguments (and everything between them)."""
    n = len(tokens)
    for i, t in enumerate(tokens):
        if t.kind != "punct" or t.text != "<" or t.in_template or i == 0:
            continue
        prev = tokens[i - 1]
        if prev.kind != "id" or prev.text == "operator":
            continue
        depth, paren, j = 1, 0, i + 1
        while j < n and depth > 0:
            u = tokens[j]
            if u.kind in ("id", "num"):
                pass
            elif u.kind == "punct" and u.text == "<":
                depth += 1
            elif u.kind == "punct" and u.text == ">":
                depth -= 1
            elif u.kind == "punct" and u.text == ">>":
                depth -= 2
            elif u.kind == "punct" and u.text in TEMPLATE_ARG_OK:
                if u.text in "([":
                    paren += 1
                elif u.text in ")]":
                    paren -= 1
                    if paren < 0:
                        break
            else:
                break
            j += 1
        if depth <= 0 and paren == 0:
            for u in tokens[i:j]:
                u.in_template = True


def _mark_messages(tokens: List[Token]) -> None:
    """Marks `throw ...;` statements and the message arguments of TORCH_CHECK-like macros: a
    mutation there changes an error message, not the numerics."""
    n = len(tokens)
    i = 0
    while i < n:
        t = tokens[i]
        if t.kind == "id" and t.text == "throw":
            j = i
            while j < n and not (tokens[j].kind == "punct" and tokens[j].text == ";"
                                 and tokens[j].depth == t.depth):
                tokens[j].in_message = True
                j += 1
            i = j
            continue
        if (t.kind == "id" and t.text in MESSAGE_CALLS and i + 1 < n and tokens[i + 1].text == "("
                and not (i > 0 and tokens[i - 1].kind == "id")):  # a call, not the declaration
            j = i + 1
            while j < n and not (tokens[j].text == ")" and tokens[j].depth == tokens[i + 1].depth):
                tokens[j].in_message = True
                j += 1
        if (t.kind == "id" and t.text in MESSAGE_MACROS and i + 1 < n and tokens[i + 1].text == "("):
            base = tokens[i + 1].depth + 1
            j, seen_comma = i + 2, False
            while j < n and not (tokens[j].text == ")" and tokens[j].depth == base - 1):
                if tokens[j].text == "," and tokens[j].depth == base:
                    seen_comma = True
                if seen_comma:
                    tokens[j].in_message = True
                j += 1
        i += 1


def _operand_end(t: Optional[Token]) -> bool:
    """True when t can end an operand, so an operator after it is binary."""
    if t is None:
        return False
    if t.kind == "num":
        return True
    if t.kind == "id":
        return t.text not in KEYWORDS_NOT_OPERAND
    if t.kind == "str" or t.kind == "chr":
        return True
    if t.kind == "punct":
        if t.text in (")", "]"):
            return True
        if t.text in (">", ">>") and t.in_template:
            return True
    return False


def _binary_spacing_ok(t: Token) -> bool:
    """Binary operators in this code base are spaced on both sides (clang-format); `T* x`, `T *x`,
    `T& x` declarations are not."""
    return t.ws_before == t.ws_after


def _grouping_paren(tokens: List[Token], j: int) -> bool:
    """True when tokens[j] is '(' that groups an expression rather than opening a call."""
    if tokens[j].text != "(":
        return False
    prev = tokens[j - 1] if j > 0 else None
    return not (prev is not None and (prev.kind == "id" and prev.text not in KEYWORDS_NOT_OPERAND
                                      or prev.text in (")", "]", ">")))


def _group_has_string(tokens: List[Token], j: int) -> bool:
    """A grouping '(' at tokens[j] whose expression is a string (a literal at its own level)."""
    d = tokens[j].depth + 1
    k = j + 1
    while k < len(tokens) and tokens[k].depth >= d:
        u = tokens[k]
        if u.depth == d and (u.kind == "str" or (u.kind == "id" and u.text in STRINGISH_IDS)):
            return True
        if u.depth == d and _grouping_paren(tokens, k) and _group_has_string(tokens, k):
            return True
        k += 1
    return False


def _string_context(tokens: List[Token], i: int) -> bool:
    """True when the operand chain around tokens[i] (same nesting level, up to a delimiter)
    builds a string: '+' there is concatenation, and '-' would not compile. Types are unknown to
    a lexer; this catches string literals, std::string(...), to_string, .dump(), .c_str() and
    parenthesized string expressions at that level."""
    d = tokens[i].depth
    stop = {";", ",", "{", "}", "=", "?", ":", "<<", ">>", "+=", "-=", "==", "!=", "&&", "||"}

    def at_level(u: Token, j: int) -> Optional[bool]:
        if u.depth < d:
            return False  # left the enclosing brackets
        if u.depth > d:
            return None
        if (u.kind == "punct" and u.text in stop) or (u.kind == "id" and u.text == "return"):
            return False
        if u.kind == "str" or (u.kind == "id" and u.text in STRINGISH_IDS):
            return True
        if _grouping_paren(tokens, j) and _group_has_string(tokens, j):
            return True
        return None

    for rng in (range(i - 1, -1, -1), range(i + 1, len(tokens))):
        for j in rng:
            r = at_level(tokens[j], j)
            if r is not None:
                if r:
                    return True
                break
    return False

"""A faster lexer for Lark's LALR parser, built from the grammar's own terminals.

Lark's contextual lexer builds one regex per parser state and a Token through a
general constructor; on IR text it took half the parse time. This lexer matches one
master regex (the grammar's terminals in priority order) and asks the parser only when
the token it found is not acceptable in the current state: then it retries with the
terminals that are, exactly as the contextual lexer would. Keywords that the grammar
spells as strings ("module", "loc") are recognised from BARE_ID matches the same way.
A test checks that it yields the same tokens as Lark's contextual lexer.
"""

from __future__ import annotations

import re

try:  # Python 3.11+
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse

from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, Token

_new_str = str.__new__
_ASCII = [chr(c) for c in range(128)]


def _first_chars(items) -> set | None:
    """ASCII characters a parsed regex can start with; None when it could start with
    anything (or we cannot tell). Zero-width items (lookarounds, anchors) are skipped."""
    first: set = set()
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            return first | {chr(arg)}
        if name == "NOT_LITERAL" or name == "ANY":
            return None
        if name == "IN":
            chars = set()
            for kind, value in arg:
                kind = str(kind)
                if kind == "LITERAL":
                    chars.add(chr(value))
                elif kind == "RANGE":
                    chars.update(chr(c) for c in range(value[0], min(value[1], 127) + 1))
                else:  # NEGATE, CATEGORY (\d, \w, \s): let every character through
                    return None
            return first | chars
        if name == "BRANCH":
            union = set()
            for branch in arg[1]:
                sub = _first_chars(branch)
                if sub is None:
                    return None
                union |= sub
            return first | union  # (no branch of ours is empty)
        if name == "SUBPATTERN":
            sub = _first_chars(arg[-1])
            return None if sub is None else first | sub
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _, body = arg
            sub = _first_chars(body)
            if sub is None:
                return None
            first |= sub
            if low > 0:
                return first
            continue
        if name in ("ASSERT", "ASSERT_NOT", "AT"):
            continue
        return None
    return None  # the pattern may match the empty string


def _token(type_, value, pos, line, column):
    token = _new_str(Token, value)
    token.type = type_
    token.value = value
    token.start_pos = pos
    token.line = line
    token.column = column
    token.end_line = None
    token.end_column = None
    token.end_pos = None
    return token


class FastLexer(Lexer):
    __future_interface__ = 2

    def __init__(self, lexer_conf):
        terminals = list(lexer_conf.terminals)
        self.ignore = set(lexer_conf.ignore)
        self.callbacks = lexer_conf.callbacks
        self.keywords: dict[str, str] = {}
        ordered = []
        string_terms = []
        for term in terminals:
            if term.pattern.type == "str" and re.fullmatch(r"[A-Za-z_]\w*", term.pattern.value):
                self.keywords[term.pattern.value] = term.name
                continue
            ordered.append(term)
            if term.pattern.type == "str":
                string_terms.append(term)
        # Lark's order: priority, then longest possible match, then longest pattern text
        ordered.sort(key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))
        self.by_name = {t.name: re.compile(t.pattern.to_regexp()) for t in terminals}
        self.order = [t.name for t in sorted(
            terminals, key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))]
        skip = "|".join(t.pattern.to_regexp() for t in terminals if t.name in self.ignore)
        pieces = [f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in ordered
                  if t.name not in self.ignore]
        # Leading whitespace and comments are skipped by the same match as the token. The
        # skip is atomic (lookahead + backreference): were it allowed to backtrack, a
        # comment at the end of the input would be cut short and its tail lexed as tokens.
        self.master = re.compile(f"(?=(?P<_SKIP>(?:{skip})*))(?P=_SKIP)(?:"
                                 + "|".join(pieces) + ")")
        self.skip = re.compile(f"(?:{skip})*")
        # One smaller alternation per first character: Python's regex engine tries the
        # alternatives in order, so the master regex spends most of its time failing.
        # The same terminals, in the same order, restricted to those that can start
        # with that character: the same token wins.
        candidates = [(t, _first_chars(sre_parse.parse(t.pattern.to_regexp())))
                      for t in ordered if t.name not in self.ignore]
        by_key: dict = {}
        self.dispatch: dict = {}
        for char in _ASCII:
            names = tuple(t.name for t, first in candidates if first is None or char in first)
            if names:
                if names not in by_key:
                    by_key[names] = re.compile("|".join(
                        f"(?P<{t.name}>{t.pattern.to_regexp()})" for t, _ in candidates
                        if t.name in names))
                self.dispatch[char] = by_key[names].match
        self.skip_starts = frozenset(c for c in _ASCII if self.skip.match(c + c).end()) | {"/"}

    def lex(self, lexer_state, parser_state):
        """Lark's lexer interface (used when Lark drives the parse)."""
        text_slice = lexer_state.text
        return self.tokens(text_slice.text, text_slice.start, text_slice.end,
                           parser_state.parse_conf.states, parser_state.state_stack,
                           parser_state)

    def tokens(self, text, pos, end, states, state_stack, parser_state=None):
        """Tokens of text[pos:end]; `states`/`state_stack` are the LALR table and the
        live stack of the parser consuming them (read to resolve contextual tokens)."""
        keywords = self.keywords
        callbacks = self.callbacks
        dispatch = self.dispatch
        skip_starts = self.skip_starts
        master_match = self.master.match
        line = 1
        line_start = 0
        find_newline = text.count
        skip_match = self.skip.match
        while pos < end:
            char = text[pos]
            if char in skip_starts:
                skipped = skip_match(text, pos).end()
                if skipped != pos:
                    newlines = find_newline("\n", pos, skipped)
                    if newlines:
                        line += newlines
                        line_start = text.rindex("\n", pos, skipped) + 1
                    pos = skipped
                    if pos >= end:
                        break
                    char = text[pos]
            match_here = dispatch.get(char)
            match = match_here(text, pos) if match_here is not None else master_match(text, pos)
            if match is None:
                raise UnexpectedCharacters(text, pos, line, pos - line_start + 1,
                                           allowed=set(states[state_stack[-1]]),
                                           state=parser_state)
            type_ = match.lastgroup
            value = match.group(type_)
            if match.start(type_) != pos:  # the master regex skipped (non-ASCII input)
                continue
            accepted = states[state_stack[-1]]
            if type_ == "BARE_ID" and value in keywords and keywords[value] in accepted:
                type_ = keywords[value]
            elif type_ not in accepted:
                type_, value = self._contextual(text, pos, accepted, type_, value)
            token = _token(type_, value, pos, line, pos - line_start + 1)
            if type_ in callbacks:
                token = callbacks[type_](token)
            newlines = value.count("\n")
            if newlines:
                line += newlines
                line_start = text.rindex("\n", pos, pos + len(value)) + 1
            pos += len(value)
            yield token

    def _contextual(self, text, pos, accepted, type_, value):
        """The token the contextual lexer would produce here; the master regex's own
        token when none fits (the parser then reports it as unexpected)."""
        for name in self.order:
            if name in accepted and name not in self.ignore:
                match = self.by_name[name].match(text, pos)
                if match is not None:
                    found = match.group()
                    if name == "BARE_ID" and found in self.keywords and self.keywords[found] in accepted:
                        return self.keywords[found], found
                    return name, found
        return type_, value

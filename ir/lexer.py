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

from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, Token

_new_str = str.__new__


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

    def lex(self, lexer_state, parser_state):
        """Lark's lexer interface (used when Lark drives the parse)."""
        text_slice = lexer_state.text
        return self.tokens(text_slice.text, text_slice.start, text_slice.end,
                           parser_state.parse_conf.states, parser_state.state_stack,
                           parser_state)

    def tokens(self, text, pos, end, states, state_stack, parser_state=None):
        """Tokens of text[pos:end]; `states`/`state_stack` are the LALR table and the
        live stack of the parser consuming them (read to resolve contextual tokens)."""
        master_match = self.master.match
        keywords = self.keywords
        callbacks = self.callbacks
        line = 1
        line_start = 0
        find_newline = text.count
        skip_match = self.skip.match
        while pos < end:
            match = master_match(text, pos)
            if match is None:
                skipped = skip_match(text, pos).end()
                newlines = find_newline("\n", pos, skipped)
                if newlines:
                    line += newlines
                    line_start = text.rindex("\n", pos, skipped) + 1
                pos = skipped
                if pos >= end:
                    break
                raise UnexpectedCharacters(text, pos, line, pos - line_start + 1,
                                           allowed=set(states[state_stack[-1]]),
                                           state=parser_state)
            type_ = match.lastgroup
            start = match.start(type_)
            if start != pos:
                newlines = find_newline("\n", pos, start)
                if newlines:
                    line += newlines
                    line_start = text.rindex("\n", pos, start) + 1
                pos = start
            value = match.group(type_)
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

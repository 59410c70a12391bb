"""CFN's syntax as toulbar2 reads it (tb2reader.cpp, CFNStreamReader): JSON with freedoms, read as
nested groups of words. Blanks, double quotes, colons and commas only separate words; `{}` and `[]`
both open a group; a line starting with `#` and the rest of a line after `//` are comments. What the
words mean is cfn.py's."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ParseError
from .source import read_lines
from .tables import charge

# toulbar2's words: what is left between blanks, quotes, colons and commas; braces are words of their own
BRACES = re.compile(r"([{}\[\]])")  # a line split at its braces, kept
WORD = re.compile(r'[^\s":,]+')  # the words between two braces
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")  # linear: no two ways to split the digits
NUMBER_START = "0123456789-+."  # a word starting so is a number, never a name (the format's rule)
# What the tree keeps per token (the Atom, its text, the list entry: ~150 bytes measured with
# tracemalloc), and a value name's index entry later.
TOKEN_BYTES = 192
CHARGE_TOKENS = 1 << 12


@dataclass
class Atom:
    text: str
    line: int


@dataclass
class Group:
    items: list
    line: int


def tree(path) -> Group:
    """The nested groups of the file; `{}` and `[]` both open a group, as toulbar2 allows."""
    stack, pending, lineno = [Group([], 1)], 0, 1
    for lineno, text in enumerate(read_lines(path), 1):
        if text.startswith("#"):
            continue
        for part in BRACES.split(text.partition("//")[0]):  # the words between braces taken at once
            if part in ("{", "["):
                stack.append(Group([], lineno))
                pending += 1
            elif part in ("}", "]"):
                if len(stack) == 1:
                    raise ParseError(path, lineno, f"unbalanced {part!r}")
                group = stack.pop()
                stack[-1].items.append(group)
                pending += 1
            elif part:
                words = WORD.findall(part)
                stack[-1].items.extend([Atom(word, lineno) for word in words])
                pending += len(words)
        if pending >= CHARGE_TOKENS:  # charged as the file is read, at most a few thousand tokens late
            _charge(path, lineno, pending)
            pending = 0
    _charge(path, lineno, pending)
    if len(stack) > 2:
        raise ParseError(path, stack[-1].line, "unclosed '{' or '[' opened here")
    if len(stack) == 2:  # the whole object left open: toulbar2 stops reading after the functions
        stack[0].items.append(stack.pop())
    if len(stack[0].items) != 1 or not isinstance(stack[0].items[0], Group):
        raise ParseError(path, 1, "a CFN file holds one object {problem, variables, functions}")
    return stack[0].items[0]


def _charge(path, lineno: int, tokens: int) -> None:
    message = charge(tokens * TOKEN_BYTES, f"{tokens:,} tokens")
    if message:
        raise ParseError(path, lineno, message)


def is_number(item) -> bool:
    return isinstance(item, Atom) and item.text[0] in NUMBER_START

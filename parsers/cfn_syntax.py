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
TOKEN = re.compile(r'[{}\[\]]|[^\s":,{}\[\]]+')
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")  # linear: no two ways to split the digits
NUMBER_START = "0123456789-+."  # a word starting so is a number, never a name (the format's rule)
# What the tree keeps per token (the Atom, its text, the list entry: ~150 bytes measured with
# tracemalloc), and a value name's index entry later.
TOKEN_BYTES = 192


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
    stack = [Group([], 1)]
    for lineno, text in enumerate(read_lines(path), 1):
        if text.startswith("#"):
            continue
        count = 0
        for count, m in enumerate(TOKEN.finditer(text.partition("//")[0]), 1):
            word = m.group()
            if word in ("{", "["):
                stack.append(Group([], lineno))
            elif word in ("}", "]"):
                if len(stack) == 1:
                    raise ParseError(path, lineno, f"unbalanced {word!r}")
                group = stack.pop()
                stack[-1].items.append(group)
            else:
                stack[-1].items.append(Atom(word, lineno))
        message = charge(count * TOKEN_BYTES, f"{count:,} tokens")  # checked line by line: a line's worth late
        if message:
            raise ParseError(path, lineno, message)
    if len(stack) > 2:
        raise ParseError(path, stack[-1].line, "unclosed '{' or '[' opened here")
    if len(stack) == 2:  # the whole object left open: toulbar2 stops reading after the functions
        stack[0].items.append(stack.pop())
    if len(stack[0].items) != 1 or not isinstance(stack[0].items[0], Group):
        raise ParseError(path, 1, "a CFN file holds one object {problem, variables, functions}")
    return stack[0].items[0]


def is_number(item) -> bool:
    return isinstance(item, Atom) and item.text[0] in NUMBER_START

"""Data-driven tests in the etcd-io/raft ``testdata/`` style: a readable script of inputs to one
ConsensusModule and the effects each input printed, so a behaviour change reads as a text diff.

A script is a sequence of cases separated by blank lines; each case is a command line (its inputs),
a ``----`` line and the output it printed. ``#`` lines before a case are comments and are kept::

    # A fresh member canvasses at its first duty cycle.
    tick at=0
    ----
    send -> 1 consensus CanvassPosition ...
    event election_state from=INIT to=CANVASS ...
    deadline 20ms

:func:`run_script` runs every case through a handler (``(command, arguments) -> output``) and
compares the outputs with the script's; with ``CLUSTERLAB_REWRITE=1`` in the environment it writes the
outputs the code prints instead (review the diff, then commit it). Parsing is deliberately strict: a
malformed script fails the test with its file and line."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REWRITE_ENV = "CLUSTERLAB_REWRITE"
SEPARATOR = "----"


@dataclass(frozen=True)
class Case:
    """One command of a script: its comment lines, the command, its arguments, the expected output."""

    comments: tuple[str, ...]
    command: str
    arguments: tuple[str, ...]
    expected: str
    line: int  # the command's line number in its file (1-based)

    def render(self, output: str) -> str:
        head = [*self.comments, " ".join((self.command, *self.arguments))]
        return "\n".join([*head, SEPARATOR, *([output] if output else [])])


def parse_script(text: str, name: str = "<script>") -> list[Case]:
    """The cases of a script; ValueError naming ``name`` and the line for anything malformed."""
    cases: list[Case] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        comments: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
            if lines[i].startswith("#"):
                comments.append(lines[i])
            elif comments:
                comments.append("")  # a blank line inside a comment block is part of it
            i += 1
        if i == len(lines):
            if any(c for c in comments):
                raise ValueError(f"{name}:{i}: a comment with no case after it")
            break
        while comments and not comments[-1]:
            comments.pop()
        command_line, start = lines[i].split(), i + 1
        i += 1
        if i == len(lines) or lines[i] != SEPARATOR:
            raise ValueError(f"{name}:{start}: {lines[start - 1]!r} is not followed by a {SEPARATOR!r} line")
        i += 1
        output: list[str] = []
        while i < len(lines) and lines[i].strip():
            output.append(lines[i])
            i += 1
        cases.append(Case(tuple(comments), command_line[0], tuple(command_line[1:]), "\n".join(output), start))
    return cases


def render_script(cases: list[Case], outputs: list[str]) -> str:
    """The script with ``outputs`` in place of the expected ones."""
    return "\n\n".join(case.render(output) for case, output in zip(cases, outputs, strict=True)) + "\n"


def run_script(path: Path, handle: Callable[[str, tuple[str, ...]], str]) -> None:
    """Run the script at ``path`` case by case; assert each output equals the script's (or rewrite the
    file with the outputs under ``CLUSTERLAB_REWRITE=1``)."""
    cases = parse_script(path.read_text(), str(path))
    assert cases, f"{path}: no cases"
    outputs: list[str] = []
    for case in cases:
        try:
            outputs.append(handle(case.command, case.arguments).rstrip("\n"))
        except Exception as e:
            raise AssertionError(f"{path}:{case.line}: {case.command} {' '.join(case.arguments)}: {e!r}") from e
    if os.environ.get(REWRITE_ENV, "") not in ("", "0"):
        path.write_text(render_script(cases, outputs))
        return
    for case, output in zip(cases, outputs, strict=True):
        assert output == case.expected, (
            f"{path}:{case.line}: {case.command} {' '.join(case.arguments)} printed\n{output}\n"
            f"but the script says\n{case.expected}\n"
            f"(rerun with {REWRITE_ENV}=1 to rewrite the script, then review the diff)"
        )


def key_values(arguments: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """Split arguments into bare words and ``key=value`` pairs."""
    words: list[str] = []
    pairs: dict[str, str] = {}
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if equals:
            if not re.fullmatch(r"[a-z_]+", key):
                raise ValueError(f"bad argument name {key!r}")
            pairs[key] = value
        else:
            words.append(argument)
    return words, pairs

"""mpiexec's command line within the system's limit, however many ranks a session has.

The launch plan starts one app context per rank (``-n 1 ... : -n 1 ...``). The kernel refuses a command line (with
the environment) beyond ``ARG_MAX`` bytes, or one argument beyond ``MAX_ARG_STRLEN``, with ``E2BIG``. So where it
would: consecutive app contexts that are the same take one ``-n K`` (:func:`rank_count_form`: the ranks of a host,
CPU ranks alike); where that is still too long, the contexts go into an mpiexec app file (``--app FILE``,
:func:`app_file_text`; PRRTE reads lines of at most :data:`APP_LINE_LIMIT` characters, words split at white space);
and where neither fits, a ConfigError says so before anything starts.

Example
-------
>>> argv = ["mpiexec", "--bind-to", "none", "-n", "1", "-x", "A=1", "py", ":", "-n", "1", "-x", "A=1", "py",
...         ":", "-n", "1", "-x", "A=2", "py"]
>>> rank_count_form(argv)
['mpiexec', '--bind-to', 'none', '-n', '2', '-x', 'A=1', 'py', ':', '-n', '1', '-x', 'A=2', 'py']
>>> print(app_file_text(argv))
-n 1 -x A=1 py
-n 1 -x A=1 py
-n 1 -x A=2 py
<BLANKLINE>
>>> fits(argv, {}), fits(argv, {}, limit=40)
(True, False)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from theanompi.core.errors import ConfigError

#: the kernel's limit on one argument or environment string (32 pages)
MAX_ARG_STRLEN = 32 * 4096
#: the longest line of an app file PRRTE reads whole (measured with Open MPI 5.0: 1,000 works, 2,000 does not)
APP_LINE_LIMIT = 1000
#: room kept for what mpiexec adds to its own environment and for the pointers' alignment
MARGIN = 64 * 1024


def arg_max() -> int:
    """The system's limit on a command line with its environment, in bytes."""
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return 128 * 1024  # POSIX's minimum is 4096; Linux's floor for the stack's quarter is 128 KiB


def command_bytes(argv: list[str], environ: Mapping[str, str]) -> int:
    """What ``argv`` and ``environ`` take of the limit: the strings, their NULs and a pointer each."""
    strings = [*argv, *(f"{key}={value}" for key, value in environ.items())]
    return sum(len(s.encode(errors="surrogateescape")) + 1 + 8 for s in strings)


def fits(argv: list[str], environ: Mapping[str, str], limit: int | None = None) -> bool:
    """Whether mpiexec may be started with ``argv`` in ``environ`` (``limit``: the system's, less a margin)."""
    limit = arg_max() - MARGIN if limit is None else limit
    longest = max((len(s.encode(errors="surrogateescape")) for s in argv), default=0)
    return longest < MAX_ARG_STRLEN and command_bytes(argv, environ) <= limit


def split_contexts(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """The global options and the app contexts (each starting at its ``-n``) of an MPMD command line."""
    start = argv.index("-n")
    contexts: list[list[str]] = [[]]
    for word in argv[start:]:
        if word == ":":
            contexts.append([])
        else:
            contexts[-1].append(word)
    return argv[:start], contexts


def join_contexts(head: list[str], contexts: list[list[str]]) -> list[str]:
    argv = list(head)
    for i, context in enumerate(contexts):
        argv += ([":"] if i else []) + context
    return argv


def rank_count_form(argv: list[str]) -> list[str]:
    """``argv`` with every run of equal app contexts (``-n 1`` each) as one context of ``-n K``."""
    head, contexts = split_contexts(argv)
    merged: list[list[str]] = []
    for context in contexts:
        if merged and merged[-1][2:] == context[2:] and context[:2] == ["-n", "1"]:
            merged[-1][1] = str(int(merged[-1][1]) + 1)
        else:
            merged.append(list(context))
    return join_contexts(head, merged)


def app_file_text(argv: list[str]) -> str:
    """The app contexts of ``argv`` as an mpiexec app file: one context a line."""
    return "".join(" ".join(context) + "\n" for context in split_contexts(argv)[1])


def fit_command_line(argv: list[str], environ: Mapping[str, str], app_path: str) -> tuple[list[str], str | None]:
    """``argv`` as mpiexec can be started with it: as it is where it fits, else in the rank-count form, else with
    its contexts in an app file at ``app_path`` (returned: the command line, and the app file's text or None).
    ConfigError when no form fits (naming the sizes)."""
    if fits(argv, environ):
        return argv, None
    shorter = rank_count_form(argv)
    if fits(shorter, environ):
        return shorter, None
    head, contexts = split_contexts(shorter)
    text = app_file_text(shorter)
    lines = [" ".join(context) for context in contexts]
    spaced = any(any(char.isspace() for char in word) for context in contexts for word in context)
    if not spaced and max(len(line) for line in lines) <= APP_LINE_LIMIT:
        return [*head, "--app", app_path], text
    raise ConfigError(f"mpiexec's command line for {len(split_contexts(argv)[1])} ranks would take "
                      f"{command_bytes(shorter, environ):,} bytes (with the environment), more than this system's "
                      f"{arg_max():,}, and its app contexts do not fit an app file ({max(map(len, lines)):,} "
                      f"characters a line, PRRTE reads {APP_LINE_LIMIT:,}): start fewer ranks or hosts")

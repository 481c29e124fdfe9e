"""``tmlauncher --dry-run``: the mpiexec command line a planned session would run and the environment each rank would
get, as lines to print. Nothing is started: no run directory, no mpiexec.

The environment is read back from the command line itself (its ``-x`` options), so what is printed is what would
run: ``-x NAME=VALUE`` sets a variable, ``-x NAME`` forwards the launcher's value.

Example
-------
>>> argv = ["mpiexec", "--bind-to", "none", "-n", "1", "-x", "OMP_NUM_THREADS=2", "-x", "PATH", "python", "s.json",
...         ":", "-n", "1", "--host", "node2:1", "-x", "OMP_NUM_THREADS=2", "python", "s.json"]
>>> contexts = app_contexts(argv)
>>> len(contexts), rank_environment(contexts[0], {"PATH": "/bin"})
(2, {'OMP_NUM_THREADS': '2', 'PATH': '/bin'})
>>> print("\\n".join(command_lines(argv)))
mpiexec --bind-to none \\
  -n 1 -x OMP_NUM_THREADS=2 -x PATH python s.json \\
  : -n 1 --host node2:1 -x OMP_NUM_THREADS=2 python s.json
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from theanompi.launch.mpiexec import mpiexec_env
from theanompi.session.remote import REMOTE_SPEC_ENV
from theanompi.session.spec import RankSpec, SessionSpec


def _global_end(argv: list[str]) -> int:
    """Where the first app context begins (its ``-n``)."""
    return argv.index("-n")


def app_contexts(argv: list[str]) -> list[list[str]]:
    """The app contexts of an MPMD mpiexec command line (``-n 1 ... : -n 1 ...``), one per rank."""
    contexts: list[list[str]] = [[]]
    for word in argv[_global_end(argv):]:
        if word == ":":
            contexts.append([])
        else:
            contexts[-1].append(word)
    return contexts


def rank_environment(context: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """What an app context's ``-x`` options give its rank: set values, and forwarded ones as ``environ`` has them."""
    env: dict[str, str] = {}
    for flag, value in zip(context, context[1:]):
        if flag == "-x":
            name, equals, given = value.partition("=")
            env[name] = given if equals else environ.get(name, "")
    return env


def command_lines(argv: list[str]) -> list[str]:
    """The command line as shell lines: the global options, then one line per app context (``\\`` continued)."""
    start = _global_end(argv)
    lines = [shlex.join(argv[:start])]
    lines += [("  : " if i else "  ") + shlex.join(context) for i, context in enumerate(app_contexts(argv))]
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def describe_launch(spec: SessionSpec, ranks: list[RankSpec], argv: list[str],
                    environ: Mapping[str, str] | None = None) -> list[str]:
    """The lines ``--dry-run`` prints for a planned session and its mpiexec ``argv``."""
    environ = os.environ if environ is None else environ
    lines = [f"tmlauncher: dry run, nothing started: {len(ranks)} ranks; RUN_DIR would be {spec.run_dir}",
             "mpiexec command line (one app context per rank):", *command_lines(argv)]
    added = {k: v for k, v in mpiexec_env(spec.options.startup_timeout).items() if environ.get(k) != v}
    if added:
        lines.append("mpiexec's own environment adds: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in added.items()))
    lines.append("each rank's environment from mpiexec (ranks on this host also inherit the launcher's; "
                 "ranks on other hosts get these alone):")
    per_rank = [context for context in app_contexts(argv) for _ in range(int(context[1]))]  # the rank-count form
    for rank, (spec_of_rank, context) in enumerate(zip(ranks, per_rank)):
        env = rank_environment(context, environ)
        words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
        if not spec_of_rank.device.is_local and REMOTE_SPEC_ENV not in env:
            words.append(f"{REMOTE_SPEC_ENV}=<session.json, encoded, once written>")
        lines.append(f"  {spec_of_rank.describe(rank)}: {' '.join(words)}")
    return lines

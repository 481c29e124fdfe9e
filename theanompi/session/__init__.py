"""A session's files and what they say: the spec every rank loads, the run directory and its lock, the ranks'
status files, the watchdog, checkpoints, the recorder and its plots, and the status lines of ranks on other hosts.

Imports :mod:`theanompi.core` only; both sides use it -- the launcher writes the spec and reads the status, each rank
reads the spec and writes records, checkpoints and status.
"""

"""The ``fedvote`` command line: one module per command group (:mod:`fedvote.cli.app` ties them)."""

from __future__ import annotations

from fedvote.cli.app import cli, main, run, summary

__all__ = ["cli", "main", "run", "summary"]

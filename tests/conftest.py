"""Fixtures for the repo-wide checks, and the table of each model suite's time at the end of a run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from zoo_tree import ROOT, SUITE_TIMES


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def pytest_collection_finish(session):
    """Model suites and README quick starts start now, beside the checks that run before them."""
    if session.config.option.collectonly:
        return
    for module in _suite_modules(session):
        module.start(session.items)


def pytest_sessionfinish(session):
    for module in _suite_modules(session):
        module.stop()


def _suite_modules(session) -> set:
    """tests/test_model_suites.py as pytest imported it (its name depends on the rootdir: importing it
    here by name could give a second copy whose jobs no test waits for)."""
    return {
        item.module
        for item in session.items
        if item.module.__name__.rsplit(".", 1)[-1] == "test_model_suites"
    }


def pytest_terminal_summary(terminalreporter):
    """After the run: each model suite's seconds, pytest summary and slowest tests (make test on a fresh clone shows
    where CI's time goes)."""
    if not SUITE_TIMES:
        return
    terminalreporter.section("model suite times")
    for model, (seconds, summary, slowest) in SUITE_TIMES.items():
        terminalreporter.write_line(f"{seconds:7.0f} s  {model}: {summary}")
        for line in slowest:
            terminalreporter.write_line(f"             {line}")
    total = sum(s for s, *_ in SUITE_TIMES.values())
    workers = os.environ.get("ZOO_SUITE_WORKERS", "2")
    terminalreporter.write_line(f"{total:7.0f} s  all model suites, summed (they ran {workers} at a time)")

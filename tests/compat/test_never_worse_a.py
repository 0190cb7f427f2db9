"""Never worse than verl 0.9.1 (issue 19's differential), half a: the CHAMP lengths as they are and
scaled 4x (long rollouts, truncated at the cap), lengths near a half and a third of the cap.

The eight families are split over two files so that pytest-xdist's workers share the
20,400 batches (a file runs on one worker: ``--dist loadfile``), by their CPU time: about
half each, near-half alone 30% of the whole (the two halves were 44 s and 70 s of one
process at load 4 when split four and four).
"""

from __future__ import annotations

from types import ModuleType

import pytest

from compat._differential import FAMILIES, run_and_report

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(900)]  # with torch and verl only

NAMES = ["CHAMP x1", "CHAMP x4", "near-half"]


def test_never_more_micro_batches_nor_worse_balance_than_verl(
    verl: ModuleType, ours: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert set(NAMES) <= set(FAMILIES)
    run_and_report(verl, ours, NAMES, monkeypatch, capsys)

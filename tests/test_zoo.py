"""The false-positive guard: clean, real architectures must lint without a single warning or error."""
from __future__ import annotations

import pytest

from mindspore_doctor import lint
from zoo import ZOO


@pytest.mark.parametrize("name", sorted(ZOO))
def test_clean_architecture_has_no_warnings_or_errors(name):
    net, loss_fn, optimizer, sample_inputs = ZOO[name]()
    report = lint(net, loss_fn, optimizer, sample_inputs)
    noisy = report.at_least("warning")
    assert not noisy, f"{name}: false positives:\n" + "\n".join(
        f"{f.code} {f.where}: {f.message}" for f in noisy
    )

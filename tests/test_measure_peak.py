"""measure_peak: exact CPU storage tracking (each storage once, baseline = live tensors)."""
import gc

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from remat.runtime.memory import StorageTracker, measure_peak  # noqa: E402

MB = 1 << 20


def _baseline() -> int:
    with StorageTracker() as tracker:
        pass
    return tracker.peak


def test_peak_counts_new_storages_once_and_returns_result():
    base = _baseline()

    def fn(n):
        a = torch.zeros(n, dtype=torch.uint8)
        view = a[: n // 2]  # a view: no new storage
        b = torch.ones(n, dtype=torch.uint8)
        return int(view.sum() + b.sum())

    result, peak = measure_peak(fn, MB)
    assert result == MB
    # two storages of 1 MiB plus tiny scalars from the sums
    assert 2 * MB <= peak - base < 2 * MB + 4096


def test_freed_storage_is_subtracted():
    base = _baseline()

    def fn():
        for _ in range(5):
            a = torch.zeros(MB, dtype=torch.uint8)
            del a
        return None

    _, peak = measure_peak(fn)
    assert MB <= peak - base < MB + 4096


def test_baseline_includes_live_tensors():
    gc.collect()
    before = _baseline()
    keep = torch.zeros(3 * MB, dtype=torch.uint8)
    after = _baseline()
    assert after - before == 3 * MB
    _, peak = measure_peak(lambda: None)
    assert peak == after
    del keep


def test_in_place_ops_and_inputs():
    x = torch.zeros(MB, dtype=torch.uint8)
    base = _baseline()

    def fn(t):
        t.add_(1)  # in place: no new storage
        return t.clone()

    out, peak = measure_peak(fn, x)
    assert out.sum() == MB
    assert MB <= peak - base < MB + 4096


def test_tracker_stops_counting_after_exit():
    with StorageTracker() as tracker:
        a = torch.zeros(MB, dtype=torch.uint8)
    peak = tracker.peak
    del a
    b = torch.zeros(2 * MB, dtype=torch.uint8)
    assert tracker.peak == peak
    del b


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_uses_allocator_statistics():
    x = torch.zeros(MB, dtype=torch.uint8, device="cuda")

    def fn(t):
        return (t + 1).sum()

    _, peak = measure_peak(fn, x)
    assert peak >= 2 * MB

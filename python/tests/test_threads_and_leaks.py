"""One Compiled used from 4 Python threads; the GIL released while a model runs; 10,000 runs leave the resident
set flat and hold no reference to their inputs; the run overhead over Compiled.bench (Relu over 1,000 floats)."""
import gc
import sys
import threading
import time

import numpy as np
import pytest

import tessel
from conftest import one_node_model


def _rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("target", ["cpu", "npu", "ref"])
def test_one_compiled_from_four_threads(digits_compiled, digits_images, target):
    compiled = digits_compiled[target]
    images = digits_images[:8]
    expected = [digits_compiled["ref"].run({"image": images[i:i + 1]})["logits"] for i in range(len(images))]
    runs = 60 if target == "cpu" else 8
    errors = []

    def work(seed):
        try:
            for k in range(runs):
                i = (seed + k) % len(images)
                got = compiled.run({"image": images[i:i + 1]})["logits"]
                if not np.allclose(got, expected[i], atol=1e-4):
                    errors.append(f"thread {seed} run {k}: image {i} gave {got}, expected {expected[i]}")
        except Exception as e:  # reported below, with the thread that raised
            errors.append(f"thread {seed}: {e!r}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_the_gil_is_released_while_a_model_runs():
    """Another Python thread keeps running during one long run (an interpreted 1024x1024 MatMul)."""
    c = tessel.compile(tessel.load(one_node_model("MatMul", [1024, 1024], inputs=("a", "b"))), "ref")
    a = np.ones((1024, 1024), np.float32)
    started = time.perf_counter()
    c.run({"a": a, "b": a})
    seconds = time.perf_counter() - started
    ticks, stop = [], threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.01)
    start = time.perf_counter()
    c.run({"a": a, "b": a})
    end = time.perf_counter()
    stop.set()
    counter.join()
    during = [t for t in ticks if start + 0.2 * (end - start) < t < end - 0.2 * (end - start)]
    assert seconds > 0.02, "the run is too short to tell"
    assert len(during) > 100, (len(during), end - start)


def test_ten_thousand_runs_leave_memory_flat(relu_cpu, digits_compiled, digits_images):
    x = np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)
    feeds = {"x": x}
    refs = sys.getrefcount(x)
    for _ in range(1000):  # warm up the allocators
        relu_cpu.run(feeds)
    gc.collect()
    before = _rss_kib()
    for _ in range(10000):
        y = relu_cpu.run(feeds)["y"]
    del y
    gc.collect()
    growth = _rss_kib() - before
    assert sys.getrefcount(x) == refs  # no run keeps its input
    assert growth < 1024, f"resident set grew by {growth} KiB over 10,000 runs (one output is 4 KiB)"
    # The interpreter and simulator paths (fewer runs: each takes longer).
    image = {"image": digits_images[:1]}
    for target in ("ref", "npu"):
        for _ in range(100):
            digits_compiled[target].run(image)
        gc.collect()
        before = _rss_kib()
        for _ in range(1000):
            digits_compiled[target].run(image)
        gc.collect()
        assert _rss_kib() - before < 1024, target


def test_run_overhead_over_bench(relu_cpu, capsys):
    """Compiled.run of Relu over 1,000 floats (cpu, 1 thread) takes at most 20 us more than Compiled.bench's
    timing of the bare call (minima over 2,000 calls each)."""
    feeds = {"x": np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)}
    bench_min_us = relu_cpu.bench(feeds, iterations=2000, warmup=100)["min_ms"] * 1000
    for _ in range(100):
        relu_cpu.run(feeds)
    clock = time.perf_counter_ns
    times = []
    for _ in range(2000):
        t0 = clock()
        relu_cpu.run(feeds)
        times.append(clock() - t0)
    run_min_us = min(times) / 1000
    run_median_us = sorted(times)[len(times) // 2] / 1000
    with capsys.disabled():
        print(f"\n  run overhead: Compiled.run min {run_min_us:.2f} us (median {run_median_us:.2f} us), "
              f"Compiled.bench min {bench_min_us:.2f} us: {run_min_us - bench_min_us:.2f} us more")
    assert run_min_us - bench_min_us <= 20

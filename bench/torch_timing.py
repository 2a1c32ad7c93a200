"""CUDA-event timing for the PyTorch reference scripts: the median of `reps` calls of fn, each
after a write of `flush` (a buffer larger than L2), after 3 untimed calls."""
import torch


def median_ms(fn, reps, flush):
    for _ in range(3):
        fn()
    times = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]

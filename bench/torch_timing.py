"""What the PyTorch reference scripts measure: CUDA-event timing (the median of `reps` calls of fn,
each after a write of `flush`, a buffer larger than L2, after 3 untimed calls), the peak memory of
a call, how far one result is from another, and a causal LM's training step."""
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


def peak_mib_above(fn):
    """MiB that fn() holds at its peak beyond what is allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def relative_error(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def lm_step(model, opt, ids):
    """A causal LM's training step on ids (labels = ids) under bf16 autocast, waited for."""
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
    return step

#!/usr/bin/env python3
"""The turn order of dev/cuda/04_attention_dq_ordered.cu checked on the host, and its time modelled.

For every shape below, the kernel's walk (each key block's steps over (query head, query block m)
with the rank it waits for) is rebuilt with the kernel's formulas and checked:
  - each query block's contributors have ranks 0 .. c-1, each once, and key block 0 (the one that
    writes bf16 dq in the fused finish) has the last;
  - the block holding rank r - 1 took an earlier ticket than the one waiting for r, so the
    lowest-ticket waiting block always waits for a running or finished one: no deadlock at any
    number of resident blocks.
Then a model (each step: C of compute, then the add, A, once the turn has come; blocks start in
ticket order on P slots) gives the time of this order and of the naive one (key blocks ascending,
the diagonal block last) against adds that never wait, at the timed shapes.

  python3 dev/cuda/04_attention_dq_ordered_order.py
"""
import heapq

BK = 64  # keys a block (kBlock)


def walk(L, S, BQ, causal, group, naive=False):
    """[(ticket, [(query head, m, rank, finisher)])] in ticket order for one (batch, kv head)."""
    key_blocks, blocks = (S + BK - 1) // BK, (L + BQ - 1) // BQ
    ctas = []
    for x in range(key_blocks):
        nb = x if naive else key_blocks - 1 - x
        first = nb * BK // BQ if causal else 0
        steps = []
        for h in range(group):
            for m in range(first, blocks):
                last = min(key_blocks - 1, ((m + 1) * BQ - 1) // BK) if causal else key_blocks - 1
                rank = nb if naive else last - nb
                steps.append((h, m, rank, nb == (last if naive else 0)))
        ctas.append((x, steps))
    return ctas


def check(L, S, BQ, causal, group):
    holder = {}
    for x, steps in walk(L, S, BQ, causal, group):
        for h, m, rank, finisher in steps:
            assert (h, m, rank) not in holder, ("rank twice", L, S, BQ, causal, h, m, rank)
            holder[(h, m, rank)] = (x, finisher)
    blocks = (L + BQ - 1) // BQ
    for h in range(group):
        for m in range(blocks):
            ranks = sorted(r for (hh, mm, r) in holder if (hh, mm) == (h, m))
            assert ranks == list(range(len(ranks))) and ranks, ("ranks not 0..c-1", L, S, BQ, causal, h, m, ranks)
            assert holder[(h, m, ranks[-1])][1], ("key block 0 is not last", L, S, BQ, causal, h, m)
            for r in ranks[1:]:
                assert holder[(h, m, r - 1)][0] < holder[(h, m, r)][0], ("waits for a later ticket", L, S, h, m, r)


def makespan(heads, T, BQ, causal, slots, C=1.0, A=0.3, order="ours"):
    """Time to run `heads` (batch, kv head) pairs dispatched in order onto `slots`; order "ours",
    "naive" (diagonal last) or "none" (adds never wait: atomics, not reproducible)."""
    free = [0.0] * slots
    start = end = 0.0
    for _ in range(heads):
        turn_at = {}  # (h, m, rank) -> time the turn reaches rank
        for _, steps in walk(T, T, BQ, causal, 1, naive=order == "naive"):
            start = max(start, heapq.heappop(free))  # tickets in order: never before the previous block
            t = start
            for h, m, rank, _ in steps:
                t = max(t + C, turn_at.get((h, m, rank), 0.0) if order != "none" else 0.0) + A
                turn_at[(h, m, rank + 1)] = t
            heapq.heappush(free, t)
            end = max(end, t)
    return end


def main():
    for L in (17, 127, 1000, 1024, 2048, 4100):
        for BQ in (32, 64):
            for causal in (True, False):
                for group in (1, 2, 4):
                    check(L, L, BQ, causal, group)
    # cross lengths (the kernel's formulas allow L != S)
    for L, S in ((100, 1000), (1000, 100), (64, 65), (65, 64)):
        for BQ in (32, 64):
            for causal in (True, False):
                check(L, S, BQ, causal, 2)
    print("order: ranks a permutation, key block 0 last, waits only on earlier blocks: ok")
    print("modelled time against adds that never wait (C = 1 a step, then the add, A = 0.3):")
    for name, heads, T, slots in (("8x12x1024 (hd 64, 3 blocks / SM)", 96, 1024, 396),
                                  ("4x32x2048 (hd 128, 2 blocks / SM)", 128, 2048, 264)):
        for causal in (True, False):
            free = makespan(heads, T, 64, causal, slots, order="none")
            ours = makespan(heads, T, 64, causal, slots) / free
            naive = makespan(heads, T, 64, causal, slots, order="naive") / free
            print(f"  {name} {'causal' if causal else 'full  '}: this order {ours:.2f}x, diagonal last {naive:.2f}x")

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""dQ_part of dev/cuda/04_attention_dq_ordered.cu emulated lane by lane on the host (no GPU needed).

The kernel's path, with the PTX semantics of ldmatrix (.x4, .trans) and mma.m16n8k16: the dkdv
loop's dS^T accumulator fragments written to shared memory (sS, keys x queries), A fragments of dS
loaded transposed through b_rows, K's B fragments through b_cols (ops/cuda/flash_attention.cuh's
addressing), the products, then the row / column each lane stores to dq_acc. Checked against
dS K in integers, for head dim 64 and 128 and BQ 32 and 64 (every output element exactly once).

  python3 dev/cuda/04_attention_dq_ordered_fragments.py
"""
import random

BK = 64  # keys a block


def a_rows(ld, row0, col0, lane):
    return (row0 + lane % 8 + 8 * ((lane // 8) % 2)) * ld + col0 + 8 * (lane // 16)


def b_rows(ld, row0, col0, lane):
    return (row0 + lane % 8 + 8 * (lane // 16)) * ld + col0 + 8 * ((lane // 8) % 2)


def ldsm_x4_t(mem, address):
    """Registers [lane][matrix] of ldmatrix.x4.trans: lane l gives row l % 8 of matrix l / 8 and
    receives (rows 2 (l % 4) and + 1, column l / 4) of each."""
    regs = [[None] * 4 for _ in range(32)]
    for j in range(4):
        rows = [address(8 * j + r) for r in range(8)]
        for lane in range(32):
            r0, c = 2 * (lane % 4), lane // 4
            regs[lane][j] = (mem[rows[r0] + c], mem[rows[r0 + 1] + c])
    return regs


def mma(acc, a, b0, b1):
    """acc[lane][4] += A (16 x 16, fragments a[lane][4]) B (16 x 8, fragments b0, b1[lane])."""
    A = [[None] * 16 for _ in range(16)]
    B = [[None] * 8 for _ in range(16)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j, (r, c) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
            A[r][c], A[r][c + 1] = a[lane][j]
        B[2 * t][g], B[2 * t + 1][g] = b0[lane]
        B[2 * t + 8][g], B[2 * t + 9][g] = b1[lane]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(4):
            r, c = g + 8 * (e >> 1), 2 * t + (e & 1)
            acc[lane][e] += sum(A[r][k] * B[k][c] for k in range(16))


def check(HD, BQ):
    lds, ld = BQ + 8, HD + 8
    row_tiles = BQ // 16
    dc = HD // (4 // row_tiles)
    ds_t = [[random.randint(-4, 4) for _ in range(BQ)] for _ in range(BK)]  # dS^T[key][query]
    k = [[random.randint(-4, 4) for _ in range(HD)] for _ in range(BK)]
    sS = [None] * (BK * lds)
    for warp in range(4):  # the dkdv accumulator layout: key wrow + g + 8 r, query nt 8 + 2 t + j
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for r in range(2):
                key = warp * 16 + g + 8 * r
                for nt in range(BQ // 8):
                    for j in range(2):
                        sS[key * lds + nt * 8 + 2 * t + j] = ds_t[key][nt * 8 + 2 * t + j]
    sK = [None] * (BK * ld)
    for key in range(BK):
        sK[key * ld:key * ld + HD] = k[key]
    got = {}
    for warp in range(4):
        qrow, qcol = 16 * (warp % row_tiles), dc * (warp // row_tiles)
        dqp = [[[0] * 4 for _ in range(32)] for _ in range(dc // 8)]
        for kt in range(BK // 16):
            a = ldsm_x4_t(sS, lambda lane: b_rows(lds, kt * 16, qrow, lane))
            for dp in range(dc // 16):
                kb = ldsm_x4_t(sK, lambda lane: a_rows(ld, kt * 16, qcol + dp * 16, lane))  # b_cols
                mma(dqp[2 * dp], a, [x[0] for x in kb], [x[1] for x in kb])
                mma(dqp[2 * dp + 1], a, [x[2] for x in kb], [x[3] for x in kb])
        for lane in range(32):  # the store: row qrow + g + 8 r, column qcol + dt 8 + 2 t + j
            g, t = lane // 4, lane % 4
            for r in range(2):
                for dt in range(dc // 8):
                    for j in range(2):
                        at = (qrow + g + 8 * r, qcol + dt * 8 + 2 * t + j)
                        assert at not in got, ("stored twice", HD, BQ, at)
                        got[at] = dqp[dt][lane][2 * r + j]
    assert len(got) == BQ * HD, ("elements missing", HD, BQ, len(got))
    for q in range(BQ):
        for d in range(HD):
            want = sum(ds_t[key][q] * k[key][d] for key in range(BK))
            assert got[(q, d)] == want, ("wrong", HD, BQ, q, d, got[(q, d)], want)


if __name__ == "__main__":
    random.seed(1)
    for HD, BQ in ((64, 64), (128, 64), (128, 32), (64, 32)):
        check(HD, BQ)
    print("dQ_part fragments: every element of dS K once and right, hd 64 / 128, BQ 32 / 64: ok")

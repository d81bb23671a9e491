#!/usr/bin/env python3
"""cuBLAS (through PyTorch, its default heuristics) at the shapes of bench/cuda/cuda_bench.cpp's
BM_CudaGemm, plus the bf16 tensor-core peak (8192^3) and device copy bandwidth: the baselines the
GPU GEMM and the end-to-end figures are divided by, measured in the same device run
(scripts/test-gpu.sh). Needs torch with CUDA; prints one line per case."""
import torch


def timed(fn, reps=50, warm=5):
    for _ in range(warm):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3  # microseconds


def timed_device(fn, flush=None, reps=50, warm=5):
    """One launch at a time, each queued behind a ~50 us sleep kernel so that the events bracket
    device time only (the host's launch cost is not counted, as CUDA graphs remove it), after
    `flush` when given (an L2 eviction, as a decode step's layers never find their weights in L2).
    The same timing as parity_gpu_bench's BM_CudaGemmSkinny (arg3 1 = cold)."""
    for _ in range(warm):
        fn()
    total = 0.0
    for _ in range(reps):
        if flush is not None:
            flush()
        torch.cuda._sleep(100_000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        total += a.elapsed_time(b)
    return total / reps * 1e3  # microseconds


def main():
    torch.manual_seed(0)
    shapes = {0: (10576, 2560), 1: (2560, 5120), 2: (50288, 2560)}  # (N, K): in_proj, out_proj, lm_head
    for sid, (n, k) in shapes.items():
        w = (torch.rand(n, k, device="cuda") * 0.1 - 0.05).to(torch.bfloat16)
        for m in (1, 8, 16, 64, 512, 4096, 16384):
            a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
            us = timed(lambda: torch.nn.functional.linear(a, w))
            print(f"cublas_gemm M={m} shape={sid} N={n} K={k}: {us:.1f} us, {2 * m * n * k / us / 1e6:.2f} TFLOP/s")
    # Decode sizes one launch at a time (device time), warm and with L2 flushed before each launch.
    junk = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for sid, (n, k) in shapes.items():
        w = (torch.rand(n, k, device="cuda") * 0.1 - 0.05).to(torch.bfloat16)
        for m in (1, 8, 16, 32, 48, 64, 128, 256):
            a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
            warm_us = timed_device(lambda: torch.nn.functional.linear(a, w))
            cold_us = timed_device(lambda: torch.nn.functional.linear(a, w), flush=lambda: junk.fill_(1))
            print(f"cublas_gemm_device M={m} shape={sid} N={n} K={k}: warm {warm_us:.1f} us, cold {cold_us:.1f} us")
    x = torch.rand(8192, 8192, device="cuda").to(torch.bfloat16)
    y = torch.rand(8192, 8192, device="cuda").to(torch.bfloat16)
    us = timed(lambda: x @ y, reps=10, warm=3)
    print(f"bf16_peak 8192^3: {2 * 8192 ** 3 / us / 1e6:.1f} TFLOP/s")
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), reps=20)
    print(f"copy 1 GiB: {2 * (1 << 30) / us / 1e6:.2f} TB/s (read + write)")


if __name__ == "__main__":
    main()

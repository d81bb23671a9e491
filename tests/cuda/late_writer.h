#pragma once
// late_writer.cu: kernels that test a programmatically launched kernel's wait (cuda_gemm_early_test.cpp).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace parity::test {

// One block that lets the next kernel be scheduled at once (griddepcontrol.launch_dependents), sleeps
// about `microseconds`, then writes a[i] = src[i] and a16[i] = src[i] rounded to bf16 (nearest even, as
// the GEMM's pre-pass rounds it) for i < n: its output arrives long after a programmatically launched
// successor has started, so a successor that read A before its griddepcontrol.wait would see the old A.
// With `done` (not null) the sleep ends early once *done reaches `expect` (copy_without_waiting's
// blocks count themselves there when their copies are made): then the write comes after the successor's
// reads whatever the scheduling delays, as long as the successor starts within `microseconds`.
void late_write(const float* src, float* a, uint16_t* a16, std::size_t n, double microseconds, cudaStream_t s,
                const unsigned* done = nullptr, unsigned expect = 0);

// Launched programmatically after the kernel before it: copies a16[0, n) into out at once, without
// griddepcontrol.wait (what a kernel reading A before its wait would see), in kCopyBlocks blocks, each
// of which then adds 1 to *done (zero it first).
constexpr unsigned kCopyBlocks = 64;
void copy_without_waiting(const uint16_t* a16, uint16_t* out, std::size_t n, unsigned* done, cudaStream_t s);

}  // namespace parity::test

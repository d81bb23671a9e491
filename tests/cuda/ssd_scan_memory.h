#pragma once
// The device memory a scan harness keeps per test model (cuda_ssd_test.cpp, cuda_ssd_step_test.cpp,
// cuda_ssd_tiling_test.cpp): the slots' fp32 or bf16 state and exact mode's replay ring, and the
// SsdState view of them that ssd_scan takes; and the packed-input shape and call schedule of the tiling and
// tensor-core walk tests.
#include <cstdint>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"

namespace parity::test {

struct ScanMemory {
  cuda::DeviceBuffer<float> s32, rx, rdt, rb;
  cuda::DeviceBuffer<uint16_t> s16;

  cuda::SsdState state(bool bf16) {
    cuda::SsdState st;
    st.state_f32 = bf16 ? nullptr : s32.data();
    st.state_bf16 = bf16 ? s16.data() : nullptr;
    st.ring_x = rx.data();
    st.ring_dt = rdt.data();
    st.ring_B = rb.data();
    return st;
  }
};

// A layer's scan shape with in_proj's packed rows x | B | C and `pad` spare columns after them.
struct PackedShape {
  int H, P, N, groups;
  int pad = 3;  // 3 leaves rows not 16-byte aligned, 0 or 4 keeps them aligned
  int I() const { return H * P; }
  int ld() const { return H * P + 2 * groups * N + pad; }
};

// One sequence's part of a pass: slot, first position, rows.
struct ScanCall {
  int slot;
  int64_t start;
  int n;
};
using ScanSchedule = std::vector<std::vector<ScanCall>>;  // passes

}  // namespace parity::test

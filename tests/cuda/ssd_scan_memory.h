#pragma once
// The device memory a scan harness keeps per test model (cuda_ssd_test.cpp, cuda_ssd_step_test.cpp,
// cuda_ssd_tiling_test.cpp): the slots' fp32 or bf16 state and exact mode's replay ring, and the
// SsdState view of them that ssd_scan takes.
#include <cstdint>

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

}  // namespace parity::test

#include "kernels_cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "common/error.h"
#include "kernels_cuda/launch_support.h"

namespace parity::cuda {
namespace {

// The driver's encoder, looked up once (outside any stream capture: the first GEMM may run while a
// CUDA graph is being recorded).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    outside_capture(
        [&] { return cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found); },
        "cudaGetDriverEntryPointByVersion");
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p) : nullptr;
  }();
  return fn;
}

// A 3D map of rows (innermost: 128 bytes of a row, box_rows rows, one matrix per box) in the 128-byte
// swizzle, the layout the wgmma descriptors read; `what` names the map and its operands in errors.
CUtensorMap encode_swizzled(CUtensorMapDataType type, const void* base, const cuuint64_t (&dims)[3],
                            const cuuint64_t (&strides)[2], int box_cols, int box_rows, const std::string& what) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) throw Error(what + ": the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map{};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace

CUtensorMap bf16_rows_tensor_map(const void* W, int K, int rows, int groups, std::int64_t group_stride, int box_rows) {
  if (K <= 0 || K % 8 != 0 || rows <= 0 || groups <= 0 || group_stride % 8 != 0 || box_rows < 1 || box_rows > 256 ||
      reinterpret_cast<std::uintptr_t>(W) % 16 != 0)
    throw Error("bf16_rows_tensor_map: unsupported operands (K " + std::to_string(K) + ", box rows " +
                std::to_string(box_rows) + ")");
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(groups)};
  // Bytes between consecutive rows and between consecutive matrices (the innermost stride is the element).
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(K) * 2,
                                 static_cast<cuuint64_t>(groups > 1 ? group_stride : std::int64_t(rows) * K) * 2};
  return encode_swizzled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, W, dims, strides, 64, box_rows,
                         "bf16_rows_tensor_map (K " + std::to_string(K) + ", rows " + std::to_string(rows) +
                             ", box rows " + std::to_string(box_rows) + ")");
}

namespace {

// The cache behind the *_cached maps: keyed by the map's kind (0: bf16 rows, 1: fp32 store), the
// base address, the shape and the row stride (ld, 0 where it follows from the shape).
template <typename Encode>
CUtensorMap cached(int kind, const void* p, int K, int rows, int box_rows, int ld, Encode&& encode) {
  struct Entry {
    const void* p;
    int kind, K, rows, box_rows, ld, device;
    CUtensorMap map;
  };
  constexpr int kEntries = 64;
  static std::mutex mu;
  static Entry entries[kEntries] = {};
  static int next = 0;  // the entry replaced next: the oldest
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  {
    const std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : entries)
      if (e.p == p && p != nullptr && e.kind == kind && e.K == K && e.rows == rows && e.box_rows == box_rows &&
          e.ld == ld && e.device == device)
        return e.map;
  }
  const CUtensorMap map = encode();  // throws on bad operands
  const std::lock_guard<std::mutex> lock(mu);
  entries[next] = Entry{p, kind, K, rows, box_rows, ld, device, map};
  next = (next + 1) % kEntries;
  return map;
}

}  // namespace

CUtensorMap bf16_rows_tensor_map_cached(const void* W, int K, int rows, int box_rows) {
  return cached(0, W, K, rows, box_rows, 0, [&] { return bf16_rows_tensor_map(W, K, rows, 1, 0, box_rows); });
}

bool f32_store_tensor_map_fits(const float* C, int N, int ldc) {
  return N > 0 && N % 4 == 0 && ldc >= N && ldc % 4 == 0 && reinterpret_cast<std::uintptr_t>(C) % 16 == 0;
}

CUtensorMap f32_store_tensor_map_cached(float* C, int N, int rows, int ldc) {
  if (rows <= 0 || !f32_store_tensor_map_fits(C, N, ldc))
    throw Error("f32_store_tensor_map: unsupported operands (N " + std::to_string(N) + ", ldc " + std::to_string(ldc) +
                ")");
  return cached(1, C, N, rows, 64, ldc, [&] {
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(N), static_cast<cuuint64_t>(rows), 1};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ldc) * 4, static_cast<cuuint64_t>(ldc) * 4 * rows};
    return encode_swizzled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, C, dims, strides, 32, 64,
                           "f32_store_tensor_map (N " + std::to_string(N) + ", rows " + std::to_string(rows) +
                               ", ldc " + std::to_string(ldc) + ")");
  });
}

}  // namespace parity::cuda

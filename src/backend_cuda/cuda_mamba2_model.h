#pragma once
// Mamba2ForCausalLM on the GPU: the network of model/mamba2_model.cpp, with weights uploaded once
// and every step run by src/kernels_cuda. Same Model interface, so the engine, the exactness gate
// and the accuracy tools run it unchanged; probe points copy to and from the host only when a hook
// asks for them.
#include <memory>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "io/hf_config.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "model/model.h"

namespace parity::backend_cuda {

// Scan cell of the GPU: exact mode's default (chosen by measurement, docs/performance.md "CUDA")
// and plain mode's chunk, which restarts at each call like vLLM's chunk_size grid.
inline constexpr int kCudaDefaultExactCell = 16;
inline constexpr int kCudaPlainCell = cuda::kMaxCell;

class CudaMamba2Model : public model::Model {
 public:
  static std::unique_ptr<CudaMamba2Model> load(const model::Checkpoint& ck, const CudaModelOptions& opt);

  const std::string& architecture() const override { return arch_; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return cfg_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<model::ProbePoint> probe_points() const override;
  void forward(const model::ForwardBatch& batch, cache::ModelCache& cache, model::ScanMode mode, float* logits,
               model::ProbeHooks* hooks = nullptr) const override;
  int default_exact_cell() const override { return kCudaDefaultExactCell; }
  const char* device() const override { return "cuda"; }
  std::optional<model::DeviceMemory> device_memory() const override { return query_device_memory(); }

 private:
  struct Layer {
    cuda::DeviceBuffer<uint16_t> in_proj_bf16, out_proj_bf16;
    cuda::DeviceBuffer<float> in_proj_f32, out_proj_f32;
    cuda::DeviceBuffer<float> in_proj_bias, out_proj_bias, conv_w, conv_b, dt_bias, A, D, gate_norm, norm;
  };
  // Scratch that grows to the largest pass and is reused (forward is const: the engine runs one pass at a time).
  struct Scratch {
    cuda::DeviceBuffer<float> resid, normed, zx, xbc, dt, y, g, out, ssd, head, logits;
    cuda::DeviceBuffer<int32_t> ints;
    cuda::DeviceBuffer<int64_t> starts;
  };

  io::Mamba2Config cfg_;
  std::string arch_ = "Mamba2ForCausalLM";
  std::string origin_;
  cache::ModelCacheSpec spec_;
  bool fp32_ = false;
  cuda::DeviceBuffer<uint16_t> embed_bf16_;  // [V][D], also the tied lm_head
  cuda::DeviceBuffer<float> embed_f32_;      // fp32 path
  cuda::DeviceBuffer<uint16_t> lm_head_bf16_;
  cuda::DeviceBuffer<float> lm_head_f32_;
  cuda::DeviceBuffer<float> norm_f_;
  std::vector<Layer> layers_;
  struct Names {
    std::string in_proj, conv1d, dt, norm, mixer, block;
  };
  std::vector<Names> names_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace parity::backend_cuda

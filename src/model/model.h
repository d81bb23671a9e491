#pragma once
// What the engine, the exactness gate, the accuracy tools and the commands need from a model,
// whatever its architecture: its identity, its probe points, the cache it needs, and one forward
// over a packed batch.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/model_cache.h"
#include "kernels/exact_grid.h"
#include "model/checkpoint.h"
#include "model/forward_batch.h"
#include "model/model_options.h"
#include "model/probe.h"

namespace parity::model {

// A device's memory as its runtime reports it (free already excludes the model's weights).
struct DeviceMemory {
  std::size_t free_bytes = 0, total_bytes = 0;
};

// Host memory for logits, freed the way it was taken (Model::host_floats).
using HostFloats = std::unique_ptr<float[], void (*)(float*)>;

class Model {
 public:
  virtual ~Model() = default;

  virtual const std::string& architecture() const = 0;  // config.json's, e.g. "Mamba2ForCausalLM"
  virtual const std::string& origin() const = 0;        // folder path or builtin:NAME
  virtual int vocab_size() const = 0;
  virtual const cache::ModelCacheSpec& cache_spec() const = 0;
  // Every probe point, in forward order.
  virtual std::vector<ProbePoint> probe_points() const = 0;

  // One pass over a packed batch. For every sequence, `start` must equal the slot's position,
  // and an attention model needs KV blocks reserved for positions [0, start + n); afterwards the
  // slot is at start + n. logits receives logit_rows.size() × vocab floats. Throws parity::Error
  // on an invalid batch before touching any state. `hooks` (optional) sees every probe point.
  virtual void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
                       ProbeHooks* hooks = nullptr) const = 0;

  int chunk_size() const { return cache_spec().chunk_size; }
  // Exact mode's cell when none is asked for: each backend's measured best (DESIGN.md rule 6).
  virtual int default_exact_cell() const { return kernels::kDefaultExactCell; }
  // Why this model cannot run exact mode on `grid` (e.g. scan products its backend does not form); empty when
  // it can. The engine asks before the first pass, so exact mode fails closed at start-up (DESIGN.md rule 7).
  // The CPU forms every product in fp32.
  virtual std::string exact_refusal(const kernels::ExactGrid& grid) const;
  // Where the forward runs: "cpu", or "cuda" for the GPU backend (src/backend_cuda).
  virtual const char* device() const { return "cpu"; }
  // The memory of the device the model runs on, for sizing its caches from a share of it
  // (EngineConfig::gpu_memory_utilization); empty on the CPU.
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }
  // Where a tensor-parallel model's ranks run and how they exchange partial sums, in a line for the
  // commands' device report (e.g. "tensor parallel 2: ranks on GPU 0, 0; host-staged collective");
  // empty for a model on one rank.
  virtual std::string placement() const { return {}; }
  // n floats of host memory (uninitialised) that forward() copies logits into fastest: page-locked on a
  // GPU backend, where the copy is then one DMA at the host link's rate (into pageable memory the CUDA
  // runtime stages it: a 256-sequence decode step of mamba2-2.7b spent ~6 ms of 25 there), ordinary
  // memory on the CPU. The engine takes one and reuses it every step.
  virtual HostFloats host_floats(std::size_t n) const;
};

// A pass's logits memory from Model::host_floats, reused across passes: grows in whole 16 rows, so a
// batch that grows by a row does not take new (page-locked) memory.
class LogitsBuffer {
 public:
  float* rows(const Model& m, std::size_t rows);

 private:
  HostFloats mem_{nullptr, [](float*) {}};
  std::size_t floats_ = 0;
};

std::vector<std::string> supported_architectures();

// Builds the model config.json names; throws parity::Error naming an unsupported architecture.
std::unique_ptr<Model> load_model(const Checkpoint& ck, const ModelOptions& opts = {});

// Every row's logits of one single-shot prefill over `tokens` (row t: after tokens[0..t]), with
// the given numerics (exact mode: its grid and state dtype).
std::vector<float> score_all_rows(const Model& m, const std::vector<int32_t>& tokens, const cache::Numerics& numerics,
                                  ProbeHooks* hooks = nullptr);
// The same with a mode's defaults (exact: the default grid, fp32 state).
std::vector<float> score_all_rows(const Model& m, const std::vector<int32_t>& tokens,
                                  ScanMode mode = ScanMode::Exact, ProbeHooks* hooks = nullptr);
// n with the model's backend and tensor-parallel degree, which are part of a run's numerics identity. Throws
// parity::Error with the model's reason when it refuses n's exact grid (Model::exact_refusal).
cache::Numerics stamp_backend(const Model& m, cache::Numerics n);

// A mode's default numerics for this model.
cache::Numerics default_numerics(const Model& m, ScanMode mode);

// The checks every forward makes before touching state (a cache built for this model's layers,
// slots, positions, KV capacity, token ids, logit rows, request ids).
void validate_batch(const Model& m, const ForwardBatch& b, const cache::ModelCache& cache, ScanMode mode);

// Row → (sequence, absolute position) for probe hooks; empty when there are no hooks.
ProbeRows probe_rows(const ForwardBatch& b, const ProbeHooks* hooks);

}  // namespace parity::model

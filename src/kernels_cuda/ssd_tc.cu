// The exact grid's SSD with the cell walk's products on tensor cores (ssd_tc.h says what it computes). This
// file holds the launches: the band (C·B, fp32, the existing launch), the table pass
// (ssd_tc_tables.cu), the walk (ssd_tc_walk.cu) or the relay (ssd_tc_relay.cu), and the replay ring. The
// band's launch also converts C and B to the bf16 rows both take. SsdTcWay::tables = 1 takes one launch for the band,
// the tables and the bf16 rows instead (ssd_tc_cell_band.cu).
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {

namespace {
std::atomic<int> programmatic_passes{kSsdTcProgrammaticDefault};
// The band's floats in the scratch, rounded up to 16 bytes: the walk's tables follow it.
std::size_t band_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return (ssd_scratch_floats(sh, p, g, SsdPrefill::span16) + 3) / 4 * 4;  // the band alone (the span walk's scratch)
}
// The walk's coefficient tables (16-byte multiples: the bf16 rows follow them).
std::size_t tables_floats(const SsdShape& sh, const PassSeqs& p) {
  return static_cast<std::size_t>(p.num_cell_tasks > 0 ? p.num_cell_tasks : 0) * sh.H * kSsdTcTableWords;
}
// The relay's cell warps for this pass and way, 0 where the walk takes it.
int relay_warps(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g, SsdTcWay way) {
  if (way.cell_warps > 0) return way.cell_warps;
  if (way.warps_p > 0) return 0;  // a walk's way named: the walk
  return ssd_tc_default_way(sh, p.num_seqs, g.products).cell_warps;
}
}  // namespace

void set_ssd_tc_programmatic(int level) {
  if (level < 0 || level > 2)
    throw Error("CUDA SSD tc: programmatic level must be 0, 1 or 2, got " + std::to_string(level));
  programmatic_passes.store(level);
}
int ssd_tc_programmatic() { return programmatic_passes.load(); }

std::size_t ssd_tc_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return band_floats(sh, p, g) + tables_floats(sh, p) + ssd_tc_rows16_floats(sh, p, g.products == ScanProducts::split);
}

bool ssd_tc_supported(const SsdShape& sh, const ScanGrid& g) {
  return g.cell == ssd::kG && sh.N == ssd::kN && sh.P % 16 == 0 && sh.P > 0 && sh.groups > 0 && sh.H % sh.groups == 0;
}

std::string ssd_tc_refusal(const SsdShape& sh, const ScanGrid& g) {
  if (g.products == ScanProducts::float32) return "";
  if (!g.exact) return "--scan-products chooses exact mode's products: add --exact";
  if (ssd_tc_supported(sh, g)) return "";
  return "--scan-products " + std::string(g.products == ScanProducts::split ? "split" : "bfloat16") +
         ": the tensor-core walk needs --exact-grid 16, a state of 128 and a head dimension that is a multiple of 16 "
         "(this model: grid " + std::to_string(g.cell) + ", state " + std::to_string(sh.N) + ", head dimension " +
         std::to_string(sh.P) + ")";
}

bool ssd_tc_takes(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p) {
  return g.exact && g.products != ScanProducts::float32 && ssd_tc_supported(sh, g) && p.num_ssu_seqs == 0 &&
         (p.num_cell_tasks > 0 || p.num_decode_seqs > 0);
}

SsdTcWay ssd_tc_default_way(const SsdShape& sh, int seqs, ScanProducts products) {
  // The walk's best ways on an H100 (32 heads × 64, 2048-row sequences, session 48, every way in one call,
  // device µs, bf16 / split products): at 2 sequences 2 × 2 warps 160 (2 × 4 169, 4 × 1 165) / 2 × 4 206 (4 × 2
  // 227); at 8, 4 × 1 254 / 4 × 2 466 (4 × 1 484); at 32, 4 × 1 889 / 4 × 1 1,687 (4 × 2 1,840). Split products
  // gain from n over two warps only while the blocks fill the SMs at most twice. A launch shape only: every way
  // gives the same bits.
  const long heads = static_cast<long>(seqs) * sh.H;
  const bool split = products == ScanProducts::split;
  SsdTcWay w;
  // The relay where its blocks (16 columns of p each) fit the GPU at once (132 SMs), one sequence in practice:
  // session 48 on an H100, 32 heads × 64 at 1 × 2048, bf16 products 125 µs against the walk's 154 (split 163
  // against 200); at 2 × 2048 (256 blocks) 220 against 170. Its shape from session 49's every-shape run (H100,
  // 1 × 2048): bf16 products 3 cells a round, one chain warp, 110 µs (2 cells 131, chain warps 2 / 4: 110 / 112);
  // split products 2 cells (3 do not fit), four chain warps, 160 (one chain warp 170). Session 50 (H100, whole
  // cells copied from sources that step by a constant): bf16 3 cells with 1 / 2 / 4 chain warps 92 / 85 / 88;
  // split 2 cells 133 / 129 / 130.
  if (heads * (sh.P / 16) <= 132) {
    w.cell_warps = split ? 2 : 3;
    w.chain_warps = 2;
  }
  if (heads <= 132) {
    w.warps_p = sh.P % 32 == 0 ? 2 : 1;
    w.warps_n = split ? 4 : 2;
  } else {
    w.warps_p = sh.P % 64 == 0 ? 4 : sh.P % 32 == 0 ? 2 : 1;
    w.warps_n = split && heads * sh.P / (16 * w.warps_p) <= 2 * 132 ? 2 : 1;
  }
  return w;
}

void ssd_tc_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
                 const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
                 cudaStream_t s, SsdTcWay way) {
  if (p.num_rows <= 0) return;
  if (!ssd_tc_supported(sh, g))
    throw Error("CUDA SSD tc: needs cell 16, N 128, P a multiple of 16 (cell " + std::to_string(g.cell) + ", N " +
                std::to_string(sh.N) + ", P " + std::to_string(sh.P) + ")");
  if (p.num_ssu_seqs > 0) throw Error("CUDA SSD tc: plain mode's one-row calls (the SSU) are not handled");
  if (g.products == ScanProducts::float32) throw Error("CUDA SSD tc: the grid asks for fp32 products (ssd_scan's)");
  if (scratch_floats < ssd_tc_scratch_floats(sh, p, g))
    throw Error("CUDA SSD tc: scratch smaller than ssd_tc_scratch_floats()");
  if (way.tables != 0 && way.tables != 1)
    throw Error("CUDA SSD tc: way.tables must be 0 (band, then table pass) or 1 (one launch), got " +
                std::to_string(way.tables));
  if (way.lean != 0 && way.lean != 1)
    throw Error("CUDA SSD tc: way.lean must be 0 or 1, got " + std::to_string(way.lean));
  if (way.programmatic < kSsdTcProcessLevel || way.programmatic > 2)
    throw Error("CUDA SSD tc: way.programmatic must be 0, 1, 2 or kSsdTcProcessLevel, got " +
                std::to_string(way.programmatic));
  const bool split = g.products == ScanProducts::split;
  if (p.num_decode_seqs > 0) ssd_tc_decode(split, sh, g, p, xbc, ld_xbc, dt, A, D, st, y, s);
  if (p.num_cell_tasks <= 0) return;
  const SsdTcWay d = ssd_tc_default_way(sh, p.num_seqs, g.products);
  const int wp = way.warps_p > 0 ? way.warps_p : d.warps_p, ks = way.warps_n > 0 ? way.warps_n : d.warps_n;
  float* tables = scratch + band_floats(sh, p, g);
  uint16_t* rows16 = reinterpret_cast<uint16_t*>(tables + tables_floats(sh, p));
  const int pdl = way.programmatic != kSsdTcProcessLevel ? way.programmatic
                  : programmatic_launch()                ? ssd_tc_programmatic()
                                                         : 0;
  if (way.tables == 1) {
    // The band stays on chip; the one launch is ordinary, so a programmatic relay after it waits for all of it.
    ssd_tc_cell_band(split, sh, g, p, xbc, ld_xbc, dt, A, st, tables, rows16, s);
  } else {
    ssd::launch_band(sh, g, p, xbc, ld_xbc, st, scratch, s, rows16, split, pdl);
    ssd_tc_tables(sh, g, p, xbc, ld_xbc, dt, A, st, scratch, tables, s, pdl > 0);
  }
  const int cw = relay_warps(sh, p, g, way);
  const int kc = way.chain_warps > 0 ? way.chain_warps : d.chain_warps > 0 ? d.chain_warps : 1;
  if (cw > 0) ssd_tc_relay(cw, kc, split, sh, g, p, xbc, ld_xbc, dt, D, st, tables, rows16, y, s, pdl > 0, way.lean);
  else ssd_tc_walk(wp, ks, split, sh, g, p, xbc, ld_xbc, dt, D, st, tables, rows16, y, s);
  if (g.exact && cw == 0) ssd::launch_ring(sh, g, p, xbc, ld_xbc, dt, st, s);  // the relay writes its own
}

}  // namespace parity::cuda

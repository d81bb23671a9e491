#pragma once
// More of the decode GEMMs' early-start flags (ops.h's GemmEarly: the same set_gemm_early word; session
// 12), for a batch-1 step whose kernels are scheduled further ahead of their inputs. The same rule as
// ops.h's: whatever runs before a kernel's wait reads only what no running kernel writes, so the same
// bits.
namespace parity::cuda {

// The swap-AB kernels' consumer warps wait for the kernel before them (griddepcontrol.wait) before
// they poll their ring's barriers, so that a GEMM scheduled early sleeps instead of polling beside
// the kernels it waits for; with it kGemmEarlyNorms acts at every row count (without, above 16 rows).
inline constexpr unsigned kGemmEarlyPark = 128u;
// The conv and plain mode's SSU let the next kernel be scheduled before their own wait (the SSU's
// state tile and, through the gated norm, out_proj's first ring can then be requested while in_proj
// still runs).
inline constexpr unsigned kGemmEarlyMixerChain = 256u;
// The swap-AB mma.sync kernel's blocks ask L2, before their wait, for every weight box of theirs past
// the ring (the ring itself goes to shared memory under kGemmEarlyWeights).
inline constexpr unsigned kGemmEarlyL2Rest = 512u;
// Session 36: the SSM step (plain mode's SSU, exact mode's decode when launched programmatically) lets the
// next kernel be scheduled before its own wait; the conv does not (kGemmEarlyMixerChain moves both). With
// kGemmEarlyGatedNormFirst as well, out_proj is scheduled once in_proj has completed and the conv passes
// its wait, so its first ring is requested during the conv and the SSM step instead of during the norm
// alone, while no block of in_proj is still waiting for an SM (gemm 427's loss). Measured (H100, batch 1):
// the SSM step's share of the path grows by what out_proj's shrinks or more, exact 2-3 % slower a step;
// off (docs/performance.md, "Session 36").
inline constexpr unsigned kGemmEarlySsmFirst = 16384u;
// The gated norm lets out_proj be scheduled before its own wait at every row count (kGemmEarlyNorms with
// kGemmEarlyPark moves every norm, the input norm's in_proj included).
inline constexpr unsigned kGemmEarlyGatedNormFirst = 32768u;

}  // namespace parity::cuda

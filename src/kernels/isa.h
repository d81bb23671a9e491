#pragma once
// Which instruction set the dispatching kernels use. All paths give identical bits (DESIGN.md
// rule 3), so the choice only changes speed; tests force each one in turn and compare.
namespace parity::kernels {

enum class Isa { Portable, Avx2, Avx512 };

const char* isa_name(Isa isa);
Isa detected_isa();          // best the CPU supports
Isa active_isa();            // detected, unless overridden
void set_isa_override(Isa);  // throws parity::Error if the CPU lacks it
void clear_isa_override();

// AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4): when the CPU has it, the AVX-512 SSD kernels
// round fp32 to bf16 with its conversion instruction, with the bits of common/dtype.h's
// f32_to_bf16 (the few values the instruction would treat otherwise take the integer sequence).
// Only speed changes; tests switch it off to compare.
bool avx512_bf16_detected();
bool avx512_bf16_active();  // detected, and not switched off
void set_avx512_bf16_enabled(bool on);

// Thread count for every parallel kernel (OpenMP). Threads split independent outputs only.
void set_num_threads(int n);
int num_threads();

// Forces every parallel kernel to split its independent outputs across the threads however small
// the work (normally small problems run on one thread: waking the others costs more). Tests and
// verify's threads scenario use it so that a small model really runs multi-threaded kernels.
void set_force_parallel(bool on);
bool force_parallel();

}  // namespace parity::kernels

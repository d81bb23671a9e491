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

// Thread count for every parallel kernel (OpenMP). Threads split independent outputs only.
void set_num_threads(int n);
int num_threads();

// Forces every parallel kernel to split its independent outputs across the threads however small
// the work (normally small problems run on one thread: waking the others costs more). Tests and
// verify's threads scenario use it so that a small model really runs multi-threaded kernels.
void set_force_parallel(bool on);
bool force_parallel();

}  // namespace parity::kernels

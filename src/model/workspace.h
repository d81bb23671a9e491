#pragma once
// Scratch activations of a forward pass, kept between passes: a pass no larger than one before
// touches no new page and fills nothing (fresh zero-filled vectors cost prefill about 10 % in
// memset and page faults). One set per thread, so forwards on different threads never share; within
// a thread each role is its own buffer, so the model, its mixer and the scan hold theirs at once.
// Contents are unspecified on entry: every user writes a buffer before reading it.
#include <cstddef>

namespace parity::model {

enum class Scratch : int {
  Resid, Normed, MixerOut, InProj, Xbc, DtRaw, Y, Gated, ScanDt, ScanX, ScanB, ScanC, Count
};

// At least n floats, 64-byte aligned, valid until the next call for the same role on this thread.
float* scratch(Scratch role, std::size_t n);

}  // namespace parity::model

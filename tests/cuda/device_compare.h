#pragma once
// Bit comparison of two device arrays on the device (device_compare.cu): for GEMM outputs of tens of
// millions of elements, which would otherwise be downloaded and compared on the host every time.
#include <cstddef>
#include <string>

namespace parity::test {

// Empty when a and b (device pointers, n floats) hold the same bits; else how many elements differ
// and the first one: its index, row and column for a row length `cols`, both values and bit patterns.
std::string device_bit_difference(const float* a, const float* b, std::size_t n, std::size_t cols);

}  // namespace parity::test

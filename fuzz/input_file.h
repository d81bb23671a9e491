#pragma once
// For parsers whose entry point is a path (they mmap or read a file): the fuzz input as a file.
// An anonymous in-memory file (memfd) reused for every input, so fuzzing leaves nothing on disk
// and each input costs a write, not a create.
#include <cstddef>
#include <cstdint>
#include <string>

namespace parity::fuzz {

// Replaces the process's input file's contents with data[0..size) and returns a path that opens it
// (/proc/self/fd/N: a regular file to stat, read and mmap).
std::string input_file(const uint8_t* data, std::size_t size);

}  // namespace parity::fuzz

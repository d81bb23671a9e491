#pragma once
// Whole-file reads and crash-safe writes shared by the io readers and writers.
#include <string>
#include <string_view>
#include <vector>

namespace parity::io {

// Throws parity::Error("cannot read PATH: reason").
std::string read_file_bytes(const std::string& path);

// Writes the pieces in order to a temp file beside `path`, fsyncs it and renames it over
// `path`, so readers see either the old file or the complete new one. Pieces are taken as a
// list so that large tensor buffers are written from where they lie, without a joined copy.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace parity::io

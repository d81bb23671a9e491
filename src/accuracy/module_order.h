#pragma once
// Forward order of module names read from a file, without the model at hand: `compare` needs
// it to say which module is the first where two runs part. Names sort by layer index (the
// number after ".layers."), then by the order `Model::probe_points()` visits a layer's
// points; names outside the layers go before (embeddings) or after (norm_f, lm_head) them.
// Unknown names keep a stable place: after the known points of their layer, alphabetically.
#include <string>
#include <vector>

namespace parity::accuracy {

int layer_index(const std::string& module);  // -1 when the name has no ".layers.N"
bool forward_before(const std::string& a, const std::string& b);
void sort_forward(std::vector<std::string>& modules);

}  // namespace parity::accuracy

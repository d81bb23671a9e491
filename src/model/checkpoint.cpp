#include "model/checkpoint.h"

#include <filesystem>

#include "common/error.h"
#include "io/json_file.h"
#include "model/builtin.h"

namespace parity::model {

Checkpoint open_checkpoint(const std::string& spec) {
  const std::string prefix = "builtin:";
  if (spec.rfind(prefix, 0) == 0) return make_builtin(spec.substr(prefix.size()));
  namespace fs = std::filesystem;
  if (!fs::is_directory(spec))
    throw Error("model '" + spec + "' is neither a checkpoint folder nor builtin:NAME");
  if (!fs::exists(fs::path(spec) / "config.json")) throw Error("no config.json in " + spec);
  Checkpoint ck;
  ck.origin = spec;
  ck.config = io::read_json_file((fs::path(spec) / "config.json").string());
  auto store = std::make_shared<io::WeightStore>(io::WeightStore::open_folder(spec));
  ck.find = [store](const std::string& n) { return store->find(n); };
  ck.keepalive = store;
  return ck;
}

}  // namespace parity::model

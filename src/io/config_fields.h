#pragma once
// Reading config.json fields for the hybrid adapters: every error names the key (and the value), keys that
// are absent or null take the caller's default (the Hugging Face config class's), and numbers are checked for
// type and range. Shared by the family adapters (nemotron_h_config.cpp, bamba_config.cpp, falcon_h1_config.cpp).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::io::cfg {

[[noreturn]] void refuse(const std::string& what);  // throws Error("config.json: " + what)

const nlohmann::json* lookup(const nlohmann::json& cfg, const std::string& key);  // null / absent → nullptr
std::optional<int> opt_int(const nlohmann::json& cfg, const std::string& key);
int int_or(const nlohmann::json& cfg, const std::string& key, int dflt);
int req_int(const nlohmann::json& cfg, const std::string& key);
// The same, with why it is required in the message ("required field K is missing (why)").
int req_int(const nlohmann::json& cfg, const std::string& key, const std::string& why);
int int_of(const nlohmann::json& v, const std::string& key);  // v itself: an integer in int's range
std::string string_of(const nlohmann::json& v, const std::string& key);  // v itself: a string
int positive(const std::string& key, int v);
bool bool_or(const nlohmann::json& cfg, const std::string& key, bool dflt);
double finite_or(const nlohmann::json& cfg, const std::string& key, double dflt);
std::optional<std::string> opt_string(const nlohmann::json& cfg, const std::string& key);
// A list of finite numbers of the given length (e.g. FalconH1's ssm_multipliers), or dflt when absent.
std::vector<double> number_list_or(const nlohmann::json& cfg, const std::string& key, std::size_t n,
                                   const std::vector<double>& dflt);
// The first key present among `keys` (HF writes attribute names; the constructor takes other spellings):
// when two are present they must agree. Returns nullptr when none is.
const nlohmann::json* one_of(const nlohmann::json& cfg, const std::vector<std::string>& keys, std::string* which);
int int_of_any(const nlohmann::json& cfg, const std::vector<std::string>& keys, int dflt);
bool bool_of_any(const nlohmann::json& cfg, const std::vector<std::string>& keys, bool dflt);
// time_step_limit [min, max] (also under `alt`), default [0, inf].
void time_step_limit(const nlohmann::json& cfg, const std::vector<std::string>& keys, double* lo, double* hi);
// The default RoPE's theta from rope_theta / rope_parameters.rope_theta (default dflt); any other rope type or
// scaling is refused by name.
double rope_theta(const nlohmann::json& cfg, double dflt);
// The only activation these blocks run: refuses anything else, naming the key.
void require_string(const nlohmann::json& cfg, const std::string& key, const std::vector<std::string>& allowed,
                    const std::string& dflt);

}  // namespace parity::io::cfg

#include "io/config_fields.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "io/json_file.h"

namespace parity::io::cfg {

void refuse(const std::string& what) { throw Error("config.json: " + what); }

const nlohmann::json* lookup(const nlohmann::json& cfg, const std::string& key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return nullptr;
  return &*it;
}

int int_of(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number_integer()) refuse(key + " must be an integer, got " + v.dump());
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int>::max()))
      refuse(key + " = " + std::to_string(u) + " is out of range");
    return static_cast<int>(u);
  }
  const auto s = v.get<int64_t>();
  if (s < std::numeric_limits<int>::min() || s > std::numeric_limits<int>::max())
    refuse(key + " = " + std::to_string(s) + " is out of range");
  return static_cast<int>(s);
}

std::string string_of(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) refuse(key + " must be a string, got " + v.dump());
  return v.get<std::string>();
}

std::optional<int> opt_int(const nlohmann::json& cfg, const std::string& key) {
  const nlohmann::json* v = lookup(cfg, key);
  if (!v) return std::nullopt;
  return int_of(*v, key);
}

int int_or(const nlohmann::json& cfg, const std::string& key, int dflt) { return opt_int(cfg, key).value_or(dflt); }

int req_int(const nlohmann::json& cfg, const std::string& key) {
  auto v = opt_int(cfg, key);
  if (!v) refuse("required field " + key + " is missing");
  return *v;
}

int req_int(const nlohmann::json& cfg, const std::string& key, const std::string& why) {
  auto v = opt_int(cfg, key);
  if (!v) refuse("required field " + key + " is missing (" + why + ")");
  return *v;
}

int positive(const std::string& key, int v) {
  if (v <= 0) refuse(key + " must be positive, got " + std::to_string(v));
  return v;
}

bool bool_or(const nlohmann::json& cfg, const std::string& key, bool dflt) {
  const nlohmann::json* v = lookup(cfg, key);
  if (!v) return dflt;
  if (!v->is_boolean()) refuse(key + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

double finite_or(const nlohmann::json& cfg, const std::string& key, double dflt) {
  const nlohmann::json* v = lookup(cfg, key);
  if (!v) return dflt;
  const double d = as_float(*v, "config.json: " + key);
  if (!std::isfinite(d)) refuse(key + " must be a finite number, got " + v->dump());
  return d;
}

std::optional<std::string> opt_string(const nlohmann::json& cfg, const std::string& key) {
  const nlohmann::json* v = lookup(cfg, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) refuse(key + " must be a string, got " + v->dump());
  return v->get<std::string>();
}

std::vector<double> number_list_or(const nlohmann::json& cfg, const std::string& key, std::size_t n,
                                   const std::vector<double>& dflt) {
  const nlohmann::json* v = lookup(cfg, key);
  if (!v) return dflt;
  if (!v->is_array() || v->size() != n)
    refuse(key + " must be a list of " + std::to_string(n) + " numbers, got " + v->dump());
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = as_float((*v)[i], "config.json: " + key + "[" + std::to_string(i) + "]");
    if (!std::isfinite(d)) refuse(key + "[" + std::to_string(i) + "] must be finite, got " + (*v)[i].dump());
    out.push_back(d);
  }
  return out;
}

const nlohmann::json* one_of(const nlohmann::json& cfg, const std::vector<std::string>& keys, std::string* which) {
  const nlohmann::json* found = nullptr;
  std::string name;
  for (const std::string& k : keys) {
    const nlohmann::json* v = lookup(cfg, k);
    if (!v) continue;
    if (found && *found != *v) refuse(name + " = " + found->dump() + " and " + k + " = " + v->dump() + " disagree");
    if (!found) {
      found = v;
      name = k;
    }
  }
  if (which) *which = name;
  return found;
}

int int_of_any(const nlohmann::json& cfg, const std::vector<std::string>& keys, int dflt) {
  std::string k;
  const nlohmann::json* v = one_of(cfg, keys, &k);
  if (!v) return dflt;
  nlohmann::json one = nlohmann::json::object();
  one[k] = *v;
  return req_int(one, k);
}

bool bool_of_any(const nlohmann::json& cfg, const std::vector<std::string>& keys, bool dflt) {
  std::string k;
  const nlohmann::json* v = one_of(cfg, keys, &k);
  if (!v) return dflt;
  if (!v->is_boolean()) refuse(k + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

void time_step_limit(const nlohmann::json& cfg, const std::vector<std::string>& keys, double* lo, double* hi) {
  *lo = 0.0;
  *hi = std::numeric_limits<double>::infinity();
  std::string k;
  const nlohmann::json* v = one_of(cfg, keys, &k);
  if (!v) return;
  if (!v->is_array() || v->size() != 2) refuse(k + " must be a list [min, max], got " + v->dump());
  *lo = as_float((*v)[0], "config.json: " + k + "[0]");
  *hi = as_float((*v)[1], "config.json: " + k + "[1]");
  if (std::isnan(*lo) || std::isnan(*hi)) refuse(k + " must not contain NaN, got " + v->dump());
  if (*lo > *hi) refuse(k + " min is greater than max: " + v->dump());
}

double rope_theta(const nlohmann::json& cfg, double dflt) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const nlohmann::json* rs = lookup(cfg, key);
    if (!rs) continue;
    if (!rs->is_object()) refuse(std::string(key) + " must be an object, got " + rs->dump());
    for (const char* tkey : {"rope_type", "type"}) {
      if (auto t = opt_string(*rs, tkey); t && *t != "default")
        refuse(std::string(key) + "." + tkey + " = '" + *t + "' is not supported (supported: default)");
    }
  }
  std::optional<double> theta;
  if (const nlohmann::json* v = lookup(cfg, "rope_theta")) theta = as_float(*v, "config.json: rope_theta");
  if (const nlohmann::json* rp = lookup(cfg, "rope_parameters")) {
    if (const nlohmann::json* v = lookup(*rp, "rope_theta")) {
      const double t = as_float(*v, "config.json: rope_parameters.rope_theta");
      if (theta && *theta != t)
        refuse("rope_theta = " + std::to_string(*theta) + " and rope_parameters.rope_theta = " + std::to_string(t) +
               " disagree");
      theta = t;
    }
  }
  const double t = theta.value_or(dflt);
  if (!(t > 0.0) || !std::isfinite(t)) refuse("rope_theta must be a positive finite number");
  return t;
}

void require_string(const nlohmann::json& cfg, const std::string& key, const std::vector<std::string>& allowed,
                    const std::string& dflt) {
  const std::string v = opt_string(cfg, key).value_or(dflt);
  std::string all;
  for (const auto& a : allowed) {
    if (a == v) return;
    all += (all.empty() ? "" : ", ") + a;
  }
  refuse(key + " = '" + v + "' is not supported (supported: " + all + ")");
}

}  // namespace parity::io::cfg

#pragma once
// Float64 building blocks for the hybrid families' hand-written reference forwards (model_nemotron_h_test.cpp,
// model_falcon_bamba_test.cpp): a weight set generated and written as a checkpoint here, and the blocks written
// from transformers' modeling files (docs/hybrids.md) — RMSNorm, Linear, the Mamba2 mixer as the plain
// sequential recurrence, causal GQA attention with (partial) RoPE, SwiGLU and ReLU² MLPs.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace parity::test::ref64 {

using Mat = std::vector<std::vector<double>>;  // [T][cols]

struct Weights {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
  std::mt19937 rng{5};
  const std::vector<float>& add(const std::string& n, std::vector<int64_t> shape, float sd, float mean = 0.0f) {
    std::size_t c = 1;
    for (auto x : shape) c *= static_cast<std::size_t>(x);
    std::normal_distribution<float> nd(mean, sd);
    std::vector<float> v(c);
    for (auto& x : v) x = nd(rng);
    return (t[n] = {std::move(shape), std::move(v)}).second;
  }
  const std::vector<float>& set(const std::string& n, std::vector<int64_t> shape, std::vector<float> v) {
    return (t[n] = {std::move(shape), std::move(v)}).second;
  }
  const std::vector<float>& at(const std::string& n) const { return t.at(n).second; }
  void write(const std::filesystem::path& file) const {
    std::vector<io::TensorToWrite> out;
    for (auto& [n, st] : t) out.push_back({n, DType::F32, st.first, st.second.data()});
    io::write_safetensors(file.string(), out, {{"format", "pt"}});
  }
};

inline Mat linear(const Mat& x, const std::vector<float>& w, int out, int in, std::size_t off = 0) {
  Mat y(x.size(), std::vector<double>(static_cast<std::size_t>(out)));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += x[t][i] * w[off + std::size_t(o) * in + i];
      y[t][o] = s;
    }
  return y;
}

inline Mat scale(Mat x, double s) {
  for (auto& r : x)
    for (auto& v : r) v *= s;
  return x;
}

inline void add_to(Mat& h, const Mat& d) {
  for (std::size_t t = 0; t < h.size(); ++t)
    for (std::size_t i = 0; i < h[t].size(); ++i) h[t][i] += d[t][i];
}

// RMSNorm over groups of the row (groups = 1: the whole row) times w.
inline std::vector<double> rms_groups(std::vector<double> r, const std::vector<float>& w, int groups, double eps) {
  const std::size_t g = r.size() / static_cast<std::size_t>(groups);
  for (int k = 0; k < groups; ++k) {
    double ms = 0;
    for (std::size_t i = 0; i < g; ++i) ms += r[k * g + i] * r[k * g + i];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(g) + eps);
    for (std::size_t i = 0; i < g; ++i) r[k * g + i] *= inv;
  }
  for (std::size_t i = 0; i < r.size(); ++i) r[i] *= w[i];
  return r;
}

inline Mat rmsnorm(const Mat& x, const std::vector<float>& w, double eps) {
  Mat y;
  for (const auto& r : x) y.push_back(rms_groups(r, w, 1, eps));
  return y;
}

inline double silu(double v) { return v / (1.0 + std::exp(-v)); }

struct MambaShape {
  int hidden = 0, inner = 0, heads = 0, head_dim = 0, groups = 1, state = 0, conv = 4;
  bool rms_norm = true, norm_before_gate = false;
  double eps = 1e-5;
  std::vector<double> segment_multipliers = {1, 1, 1, 1, 1};  // FalconH1's ssm_multipliers
};

// The Mamba2 mixer (prefix p: in_proj.weight, conv1d.weight/bias, dt_bias, A_log, D, norm.weight,
// out_proj.weight), dt = softplus(dt_raw + dt_bias) unclamped, state h = exp(dt·A) h + dt·x ⊗ B, y = h·C + D·x.
inline Mat mamba2(const Mat& x, const Weights& w, const std::string& p, const MambaShape& s) {
  const int I = s.inner, G = s.groups, N = s.state, nh = s.heads, P = s.head_dim, K = s.conv;
  const int conv = I + 2 * G * N, proj = I + conv + nh;
  const std::size_t T = x.size();
  Mat zx = linear(x, w.at(p + "in_proj.weight"), proj, s.hidden);
  const int ends[5] = {I, 2 * I, 2 * I + G * N, 2 * I + 2 * G * N, proj};
  for (auto& r : zx)
    for (int c = 0, seg = 0; c < proj; ++c) {
      while (c >= ends[seg]) ++seg;
      r[c] *= s.segment_multipliers[static_cast<std::size_t>(seg)];
    }
  const auto& cw = w.at(p + "conv1d.weight");
  const auto& cb = w.at(p + "conv1d.bias");
  Mat xbc(T, std::vector<double>(static_cast<std::size_t>(conv)));
  for (std::size_t t = 0; t < T; ++t)
    for (int c = 0; c < conv; ++c) {
      double a = cb[c];
      for (int k = 0; k < K; ++k) {
        const long src = static_cast<long>(t) - (K - 1) + k;
        if (src >= 0) a += cw[std::size_t(c) * K + k] * zx[src][I + c];
      }
      xbc[t][c] = silu(a);
    }
  std::vector<std::vector<double>> state(static_cast<std::size_t>(nh), std::vector<double>(std::size_t(P) * N));
  Mat out;
  for (std::size_t t = 0; t < T; ++t) {
    std::vector<double> y(static_cast<std::size_t>(I)), z(zx[t].begin(), zx[t].begin() + I);
    for (int h = 0; h < nh; ++h) {
      const int g = h / (nh / G);
      const double raw = zx[t][I + conv + h] + w.at(p + "dt_bias")[h];
      const double dt = raw > 30 ? raw : std::log1p(std::exp(raw));
      const double A = -std::exp(static_cast<double>(w.at(p + "A_log")[h]));
      const double da = std::exp(dt * A);
      for (int i = 0; i < P; ++i) {
        const double xv = xbc[t][h * P + i];
        double acc = 0;
        for (int n = 0; n < N; ++n) {
          double& st = state[h][std::size_t(i) * N + n];
          st = st * da + dt * xv * xbc[t][I + g * N + n];
          acc += st * xbc[t][I + G * N + g * N + n];
        }
        y[h * P + i] = acc + w.at(p + "D")[h] * xv;
      }
    }
    std::vector<double> u(static_cast<std::size_t>(I));
    if (!s.rms_norm) {
      for (int i = 0; i < I; ++i) u[i] = y[i] * silu(z[i]);
    } else if (s.norm_before_gate) {
      u = rms_groups(y, w.at(p + "norm.weight"), G, s.eps);
      for (int i = 0; i < I; ++i) u[i] *= silu(z[i]);
    } else {
      for (int i = 0; i < I; ++i) u[i] = y[i] * silu(z[i]);
      u = rms_groups(u, w.at(p + "norm.weight"), G, s.eps);
    }
    out.push_back(u);
  }
  return linear(out, w.at(p + "out_proj.weight"), s.hidden, I);
}

struct AttnShape {
  int hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;  // rotary_dim 0: no RoPE
  double theta = 10000.0, key_multiplier = 1.0;
};

// Causal GQA attention (prefix p: q_proj, k_proj, v_proj, o_proj), RoPE by rotate_half on the first rotary_dim
// elements of each head at position t, scale 1/sqrt(head_dim).
inline Mat attention(const Mat& x, const Weights& w, const std::string& p, const AttnShape& a) {
  const int D = a.head_dim, nq = a.heads, nkv = a.kv_heads;
  const std::size_t T = x.size();
  Mat q = linear(x, w.at(p + "q_proj.weight"), nq * D, a.hidden);
  Mat k = scale(linear(x, w.at(p + "k_proj.weight"), nkv * D, a.hidden), a.key_multiplier);
  const Mat v = linear(x, w.at(p + "v_proj.weight"), nkv * D, a.hidden);
  auto rope = [&](Mat& m, int heads) {
    const int half = a.rotary_dim / 2;
    for (std::size_t t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const double ang = static_cast<double>(t) * std::pow(a.theta, -2.0 * i / a.rotary_dim);
          double& x1 = m[t][h * D + i];
          double& x2 = m[t][h * D + i + half];
          const double a1 = x1, a2 = x2;
          x1 = a1 * std::cos(ang) - a2 * std::sin(ang);
          x2 = a2 * std::cos(ang) + a1 * std::sin(ang);
        }
  };
  if (a.rotary_dim > 0) {
    rope(q, nq);
    rope(k, nkv);
  }
  Mat o(T, std::vector<double>(static_cast<std::size_t>(nq * D)));
  for (std::size_t t = 0; t < T; ++t)
    for (int hq = 0; hq < nq; ++hq) {
      const int kv = hq / (nq / nkv);
      std::vector<double> sc(t + 1);
      double mx = -1e300;
      for (std::size_t u = 0; u <= t; ++u) {
        double d = 0;
        for (int i = 0; i < D; ++i) d += q[t][hq * D + i] * k[u][kv * D + i];
        sc[u] = d / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, sc[u]);
      }
      double z = 0;
      for (auto& e : sc) z += (e = std::exp(e - mx));
      for (std::size_t u = 0; u <= t; ++u)
        for (int i = 0; i < D; ++i) o[t][hq * D + i] += sc[u] / z * v[u][kv * D + i];
    }
  return linear(o, w.at(p + "o_proj.weight"), a.hidden, nq * D);
}

// down(up(x) ⊙ silu(gate(x) · gm)) · dm (prefix p: gate_proj, up_proj, down_proj).
inline Mat swiglu(const Mat& x, const Weights& w, const std::string& p, int hidden, int F, double gm = 1.0,
                  double dm = 1.0) {
  const Mat g = linear(x, w.at(p + "gate_proj.weight"), F, hidden), u = linear(x, w.at(p + "up_proj.weight"), F, hidden);
  Mat a = u;
  for (std::size_t t = 0; t < a.size(); ++t)
    for (int i = 0; i < F; ++i) a[t][i] = u[t][i] * silu(g[t][i] * gm);
  return scale(linear(a, w.at(p + "down_proj.weight"), hidden, F), dm);
}

// The worst row's relative error of fp32 logits against float64 ones.
inline double worst_row(const std::vector<float>& got, const Mat& ref) {
  double worst = 0;
  const std::size_t V = ref.empty() ? 0 : ref[0].size();
  for (std::size_t t = 0; t < ref.size(); ++t) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < V; ++i) {
      const double d = got[t * V + i] - ref[t][i];
      num += d * d;
      den += ref[t][i] * ref[t][i];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

}  // namespace parity::test::ref64

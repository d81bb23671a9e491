// The HTML report: one file, inline SVG, no script, so it can be mailed or attached to an issue.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

#include "accuracy/compare_report.h"
#include "accuracy/module_order.h"
#include "common/format.h"

namespace parity::accuracy {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// The series a module belongs to in the by-layer plot: its name with the layer index replaced.
std::string series_of(const std::string& m) {
  const int l = layer_index(m);
  if (l < 0) return m;
  const std::size_t at = m.find(".layers.") + 8;
  const std::size_t end = m.find('.', at);
  return m.substr(0, at) + "*" + (end == std::string::npos ? "" : m.substr(end));
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Max error by layer on a log axis; x slots: "in" (before the layers), 0 … L-1, "out" (after).
std::string svg_by_layer(const CompareResult& r, bool relative, double tol) {
  int max_layer = -1;
  for (const auto& m : r.modules) max_layer = std::max(max_layer, layer_index(m.name));
  const int slots = max_layer + 3;
  auto slot_of = [&](const std::string& m) {
    const int l = layer_index(m);
    if (l >= 0) return l + 1;
    return m.find("embed") != std::string::npos ? 0 : slots - 1;
  };
  double lo = 0.0, hi = 0.0;
  bool any = false;
  for (const auto& m : r.modules) {
    const double v = relative ? m.max_rel : m.max_abs;
    if (v > 0 && std::isfinite(v)) {
      const double e = std::log10(v);
      lo = any ? std::min(lo, e) : e;
      hi = any ? std::max(hi, e) : e;
      any = true;
    }
  }
  if (tol > 0) {
    const double e = std::log10(tol);
    lo = any ? std::min(lo, e) : e;
    hi = any ? std::max(hi, e) : e;
    any = true;
  }
  if (!any) lo = -8, hi = 0;
  lo = std::floor(lo) - 1;  // one decade below the smallest error holds the exact zeros
  hi = std::max(std::ceil(hi), lo + 2);
  const double W = 1000, H = 300, L = 70, R = 260, T = 20, B = 40;  // legend in the right margin
  auto X = [&](int slot) { return L + (W - L - R) * (slots == 1 ? 0.5 : (slot + 0.5) / slots); };
  auto Y = [&](double v) {
    const double e = v <= 0 ? lo : std::isinf(v) ? hi : std::log10(v);
    return T + (H - T - B) * (hi - e) / (hi - lo);
  };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + format_number("%.0f", W) + "\" height=\"" +
                  format_number("%.0f", H) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect x=\"" + format_number("%.1f", L) + "\" y=\"" + format_number("%.1f", T) + "\" width=\"" + format_number("%.1f", W - L - R) +
       "\" height=\"" + format_number("%.1f", H - T - B) + "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
  for (int e = static_cast<int>(lo); e <= static_cast<int>(hi); ++e) {
    const double y = Y(std::pow(10.0, e));
    const std::string label = e == static_cast<int>(lo) ? "0" : "1e" + std::to_string(e);
    s += "<line x1=\"" + format_number("%.1f", L) + "\" x2=\"" + format_number("%.1f", W - R) + "\" y1=\"" + format_number("%.1f", y) + "\" y2=\"" +
         format_number("%.1f", y) + "\" stroke=\"#ddd\"/><text x=\"" + format_number("%.1f", L - 6) + "\" y=\"" + format_number("%.1f", y + 4) +
         "\" text-anchor=\"end\">" + label + "</text>\n";
  }
  for (int k = 0; k < slots; ++k) {
    const std::string label = k == 0 ? "in" : k == slots - 1 ? "out" : std::to_string(k - 1);
    s += "<text x=\"" + format_number("%.1f", X(k)) + "\" y=\"" + format_number("%.1f", H - B + 16) + "\" text-anchor=\"middle\">" + label +
         "</text>\n";
  }
  s += "<text x=\"" + format_number("%.1f", (L + W - R) / 2) + "\" y=\"" + format_number("%.1f", H - 6) +
       "\" text-anchor=\"middle\">layer</text>\n";
  s += "<text x=\"14\" y=\"" + format_number("%.1f", (H - B + T) / 2) + "\" transform=\"rotate(-90 14 " +
       format_number("%.1f", (H - B + T) / 2) + ")\" text-anchor=\"middle\">" + (relative ? "max rel error" : "max abs error") +
       "</text>\n";
  if (tol > 0)
    s += "<line x1=\"" + format_number("%.1f", L) + "\" x2=\"" + format_number("%.1f", W - R) + "\" y1=\"" + format_number("%.1f", Y(tol)) +
         "\" y2=\"" + format_number("%.1f", Y(tol)) + "\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n";

  std::map<std::string, std::vector<const ModuleComparison*>> series;
  std::vector<std::string> order;
  for (const auto& m : r.modules) {
    const std::string k = series_of(m.name);
    if (!series.count(k)) order.push_back(k);
    series[k].push_back(&m);
  }
  int legend_y = static_cast<int>(T) + 12;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const char* c = kColors[i % std::size(kColors)];
    const auto& pts = series[order[i]];
    std::string poly;
    for (const ModuleComparison* m : pts) {
      const double v = relative ? m->max_rel : m->max_abs;
      poly += format_number("%.1f", X(slot_of(m->name))) + "," + format_number("%.1f", Y(v)) + " ";
    }
    if (pts.size() > 1) s += "<polyline points=\"" + poly + "\" fill=\"none\" stroke=\"" + c + "\"/>\n";
    for (const ModuleComparison* m : pts) {
      const double v = relative ? m->max_rel : m->max_abs;
      const bool first = r.first && r.first->module == m->name;
      s += "<circle cx=\"" + format_number("%.1f", X(slot_of(m->name))) + "\" cy=\"" + format_number("%.1f", Y(v)) + "\" r=\"" +
           (first ? "6" : "3") + "\" fill=\"" + c + "\"" + (first ? " stroke=\"#000\" stroke-width=\"2\"" : "") +
           "><title>" + esc(m->name) + ": " + format_error(v) + "</title></circle>\n";
    }
    s += "<rect x=\"" + format_number("%.1f", W - R + 12) + "\" y=\"" + std::to_string(legend_y - 8) +
         "\" width=\"8\" height=\"8\" fill=\"" + c + "\"/><text x=\"" + format_number("%.1f", W - R + 24) + "\" y=\"" +
         std::to_string(legend_y) + "\">" + esc(order[i]) + "</text>\n";
    legend_y += 13;
  }
  return s + "</svg>\n";
}

}  // namespace

std::string compare_html(const CompareResult& r, const std::string& file_a, const std::string& file_b) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>parity compare</title>\n<style>"
                  "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
                  "td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}"
                  "td:first-child,th:first-child{text-align:left;font-family:monospace}"
                  "tr.parts td{background:#fdecea}tr.first td{background:#f8c9c4;font-weight:bold}"
                  ".note{color:#555}</style></head><body>\n";
  h += "<h1>parity compare</h1>\n<p>A: <code>" + esc(file_a) + "</code><br>B: <code>" + esc(file_b) + "</code><br>";
  h += "tolerance: a row parts when max|A&minus;B| &gt; atol + rtol&middot;max(|A|, |B|), atol " +
       format_error(r.options.atol) + ", rtol " + format_error(r.options.rtol) + "</p>\n";
  if (r.first)
    h += "<p><b>First divergence:</b> <code>" + esc(r.first->module) + "</code> at prompt " +
         std::to_string(r.first->prompt) + ", position " + std::to_string(r.first->position) + " (max abs " +
         format_error(r.first->error.max_abs) + ", max rel " + format_error(r.first->error.max_rel) + ")</p>\n";
  else
    h += "<p><b>No module parts beyond the tolerance.</b></p>\n";
  h += "<h2>Max abs error by layer</h2>\n" + svg_by_layer(r, false, r.options.atol);
  h += "<h2>Max rel error by layer</h2>\n" + svg_by_layer(r, true, r.options.rtol);
  h += "<h2>Modules (forward order)</h2>\n<table><tr><th>module</th><th>cols</th><th>rows</th><th>max abs</th>"
       "<th>max rel</th><th>worst at</th><th>parting rows</th><th>first parting</th></tr>\n";
  for (const auto& m : r.modules) {
    const bool first = r.first && r.first->module == m.name;
    h += std::string("<tr") + (first ? " class=\"first\"" : m.rows_parting ? " class=\"parts\"" : "") + "><td>" +
         esc(m.name) + "</td><td>" + std::to_string(m.cols) + "</td><td>" + std::to_string(m.rows_compared) + "</td><td>" +
         format_error(m.max_abs) + "</td><td>" + format_error(m.max_rel) + "</td><td>" +
         row_label(m.worst_prompt, m.worst_position) +
         "</td><td>" + std::to_string(m.rows_parting) + "</td><td>" +
         row_label(m.first_prompt, m.first_position) +
         "</td></tr>\n";
  }
  h += "</table>\n";
  for (const std::string& n : r.notes) h += "<p class=\"note\">note: " + esc(n) + "</p>\n";
  return h + "</body></html>\n";
}

}  // namespace parity::accuracy

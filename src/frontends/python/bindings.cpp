// `import parity`: the pybind11 module parity._core (the package parity re-exports it).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "accuracy/captures_file.h"
#include "common/error.h"
#include "engine/request.h"
#include "frontends/python/convert.h"
#include "frontends/python/llm.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;
using namespace parity;
using namespace parity::python;

namespace {

const char* layout_name(accuracy::CaptureLayout l) { return l == accuracy::CaptureLayout::Step ? "step" : "flat"; }

accuracy::CaptureLayout layout_of(const std::string& s) {
  if (s == "flat") return accuracy::CaptureLayout::Flat;
  if (s == "step") return accuracy::CaptureLayout::Step;
  throw Error("layout must be 'flat' or 'step', not '" + s + "'");
}

py::list logprobs_to_python(const std::vector<std::vector<engine::TokenLogprob>>& lp) {
  py::list out;
  for (const auto& v : lp) {
    py::list step;
    for (const auto& t : v) step.append(py::make_tuple(t.token, t.logprob));
    out.append(step);
  }
  return out;
}

py::object logits_to_python(const engine::RequestResult& r) {
  if (r.logit_rows.empty()) return py::none();
  const int64_t cols = static_cast<int64_t>(r.logit_rows[0].size());
  py::array_t<float> a({static_cast<py::ssize_t>(r.logit_rows.size()), static_cast<py::ssize_t>(cols)});
  float* p = a.mutable_data();
  for (const auto& row : r.logit_rows) p = std::copy(row.begin(), row.end(), p);
  return a;
}

void bind_captures(py::module_& m) {
  py::class_<accuracy::PromptCapture>(m, "PromptCapture",
                                      "One prompt of a captures file: its tokens and the captured tensors.")
      .def_readonly("prompt_token_ids", &accuracy::PromptCapture::prompt_token_ids, "The prompt's token ids.")
      .def_readonly("continuation_token_ids", &accuracy::PromptCapture::continuation_token_ids,
                    "The tokens fed after the prompt (generated or forced); may be empty.")
      .def_property_readonly(
          "tensors",
          [](const accuracy::PromptCapture& p) {
            py::dict d;
            for (const auto& [name, mat] : accuracy::flatten(p)) d[py::str(name)] = to_numpy(mat);
            return d;
          },
          "dict module → float32 numpy array [positions, features], row = absolute position (step captures are "
          "flattened: all rows of step 0, then the last row of each later step).")
      .def_property_readonly(
          "steps",
          [](const accuracy::PromptCapture& p) {
            py::dict d;
            for (const auto& [name, steps] : p.steps) {
              py::list l;
              for (const auto& s : steps) l.append(to_numpy(s));
              d[py::str(name)] = l;
            }
            return d;
          },
          "Step layout only: dict module → list of float32 arrays [rows, features], one per step; {} for a flat "
          "file.");

  py::class_<accuracy::Captures>(m, "Captures",
                                 "Named intermediate tensors per prompt: what `parity capture` writes and `parity "
                                 "compare` / `validate` read (docs/accuracy.md).")
      .def_property_readonly("layout", [](const accuracy::Captures& c) { return layout_name(c.layout); },
                             "'flat' or 'step'.")
      .def_property_readonly("modules", &accuracy::captured_modules, "The captured probe points, in forward order.")
      .def_readonly("prompts", &accuracy::Captures::prompts, "List of PromptCapture, one per prompt.")
      .def_readonly("metadata", &accuracy::Captures::metadata,
                    "The file's other metadata (model, mode, numerics identity, …).")
      .def(
          "save", [](const accuracy::Captures& c, const std::string& path) { accuracy::write_captures(path, c); },
          py::arg("path"), "Write as a captures file (safetensors) that the CLI's compare and validate read.")
      .def("__repr__", [](const accuracy::Captures& c) {
        return "<parity.Captures layout=" + std::string(layout_name(c.layout)) +
               " prompts=" + std::to_string(c.prompts.size()) +
               " modules=" + std::to_string(accuracy::captured_modules(c).size()) + ">";
      });

  m.def("read_captures", &accuracy::read_captures, py::arg("path"),
        "Read a captures file (from `parity capture`, LLM.capture(...).save or tools/capture_hf.py).");
}

void bind_results(py::module_& m) {
  py::class_<Completion>(m, "CompletionOutput", "What one request of LLM.generate produced.")
      .def_readonly("prompt_token_ids", &Completion::prompt_token_ids, "The prompt's token ids.")
      .def_property_readonly("token_ids", [](const Completion& c) { return c.result.tokens; },
                             "Generated (or forced) token ids.")
      .def_property_readonly("finish_reason",
                             [](const Completion& c) { return engine::finish_reason_name(c.result.finish); },
                             "'length', 'stop', 'forced' or 'aborted' (as `parity generate`).")
      .def_property_readonly("logprobs", [](const Completion& c) { return logprobs_to_python(c.result.logprobs); },
                             "Per generated token, a list of (token id, log-prob): the chosen token, then the top "
                             "N (descending) when logprobs=N was asked; [] otherwise.")
      .def_property_readonly("logits", [](const Completion& c) { return logits_to_python(c.result); },
                             "float32 array [rows, vocab] of the raw logits from position P-1 on (P prompt tokens): "
                             "one row per generated token, and with forced tokens one more after the last; what "
                             "`generate --dump-logits` writes. None unless return_logits=True.")
      .def_readonly("text", &Completion::text,
                    "The generated tokens as text (special tokens left out, as `parity generate` prints); None when "
                    "the model has no tokenizer.")
      .def_property_readonly("num_preemptions", [](const Completion& c) { return c.result.num_preemptions; },
                             "How often the scheduler preempted the request (it then recomputed).")
      .def("__repr__", [](const Completion& c) {
        return "<parity.CompletionOutput tokens=" + std::to_string(c.result.tokens.size()) +
               " finish_reason=" + engine::finish_reason_name(c.result.finish) + ">";
      });

  py::class_<ValidateResult>(m, "ValidationResult", "What LLM.validate found (as `parity validate`).")
      .def_readonly("passed", &ValidateResult::passed, "True when every checked token is within tolerance.")
      .def_property_readonly("report", [](const ValidateResult& r) { return to_python(r.report); },
                             "The full report as a dict (the JSON of `validate --json`, docs/accuracy.md).")
      .def_readonly("summary", &ValidateResult::summary, "The table `parity validate` prints.")
      .def_readonly("numerics_difference", &ValidateResult::numerics_difference,
                    "Empty, or the numerics identity keys on which this run and the reference differ (then the "
                    "two cannot match bit for bit).")
      .def("__bool__", [](const ValidateResult& r) { return r.passed; })
      .def("__repr__", [](const ValidateResult& r) {
        return std::string("<parity.ValidationResult passed=") + (r.passed ? "True" : "False") + ">";
      });
}

void bind_tokenizer(py::module_& m) {
  using tokenizer::Tokenizer;
  py::class_<Tokenizer>(m, "Tokenizer",
                        "A Hugging Face tokenizer.json (byte-level BPE) giving the ids HF `tokenizers` gives "
                        "(docs/tokenizer.md); what `parity tokenize` / `detokenize` use.")
      .def_static(
          "from_file", [](const std::string& path) { return Tokenizer::from_file(path); }, py::arg("path"),
          "Load a tokenizer.json (and tokenizer_config.json beside it). Raises parity.Error naming an unsupported part.")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            py::gil_scoped_release unlocked;
            return t.encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true,
          "Text → token ids (with the post-processor's special tokens unless add_special_tokens=False).")
      .def(
          "decode",
          [](const Tokenizer& t, const py::object& ids, bool skip_special_tokens) {
            return t.decode(tokens_from(ids, "decode: ids"), skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false,
          "Token ids → text. Ids with no token are skipped, as Hugging Face does; invalid UTF-8 becomes U+FFFD.")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size, "Largest id + 1, added tokens included.")
      .def_property_readonly("eos_token_id", &Tokenizer::eos_token_id, "The end-of-sequence id, or None.")
      .def_property_readonly("bos_token_id", &Tokenizer::bos_token_id, "The beginning-of-sequence id, or None.")
      .def_property_readonly("chat_template", &Tokenizer::chat_template,
                             "tokenizer_config.json's chat template (Jinja text), or None.")
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"), "The id of a token string, or None.")
      .def("id_to_token", &Tokenizer::id_to_token, py::arg("id"), "The token string of an id, or None.")
      .def("__repr__", [](const Tokenizer& t) {
        return "<parity.Tokenizer " + t.origin() + " vocab=" + std::to_string(t.vocab_size()) + ">";
      });

  m.def(
      "load_tokenizer",
      [](const std::string& model) {
        auto t = tokenizer::load_for_model(model);
        if (!t) throw Error(model + " has no tokenizer.json");
        return t;
      },
      py::arg("model"),
      "The tokenizer of a model spec: tokenizer.json in a checkpoint folder, or builtin:NAME's built-in tokenizer.");
}

LlmOptions llm_options(bool exact, const py::object& additional_config, const std::optional<std::string>& cache_dtype,
                       const std::optional<int>& exact_grid, const std::string& exact_stagger,
                       const std::string& moe_routing, int max_num_seqs, int max_num_batched_tokens,
                       int64_t max_model_len, double state_memory_mb, double gpu_memory_utilization,
                       const std::optional<int>& threads, const std::string& device,
                       const std::optional<std::string>& dtype, int tensor_parallel_size, bool enforce_eager,
                       const std::string& scan_products) {
  LlmOptions o;
  o.device.device = device;
  o.device.dtype = dtype.value_or("");
  o.device.tensor_parallel_size = tensor_parallel_size;
  o.device.enforce_eager = enforce_eager;
  o.numerics.exact = exact;
  o.numerics.cache_dtype = cache_dtype.value_or("");
  o.numerics.exact_grid = exact_grid.value_or(-1);
  o.numerics.stagger = exact_stagger;
  o.numerics.scan_products = scan_products;
  if (!additional_config.is_none()) o.additional_config = json_text(additional_config);
  o.moe_routing = moe_routing;
  o.max_num_seqs = max_num_seqs;
  o.max_num_batched_tokens = max_num_batched_tokens;
  o.max_model_len = max_model_len;
  o.state_memory_mb = state_memory_mb;
  o.gpu_memory_utilization = gpu_memory_utilization;
  if (threads) {
    if (*threads < 1) throw Error("threads must be at least 1, got " + std::to_string(*threads));
    o.threads = *threads;
  }
  return o;
}

// Text arguments, encoded as the CLI's --prompt-text (special tokens) and --forced-text (none).
Encoder prompt_encoder(const Llm& l) {
  return [&l](const std::string& text, const std::string& what) { return l.encode(text, what, true); };
}
Encoder continuation_encoder(const Llm& l) {
  return [&l](const std::string& text, const std::string& what) { return l.encode(text, what, false); };
}

constexpr const char* kLlmDoc = R"doc(A model loaded for inference, with the engine options every call uses.

LLM(model, exact=False, additional_config=None, *, mamba_ssm_cache_dtype=None, exact_grid=None,
    exact_stagger="auto", moe_routing="direct", max_num_seqs=8, max_num_batched_tokens=2048,
    max_model_len=1048576, state_memory_mb=0.0, gpu_memory_utilization=0.0, threads=None, device="cpu",
    dtype=None, tensor_parallel_size=1, enforce_eager=False, scan_products="float32")

model: a Hugging Face checkpoint folder (config.json + safetensors) or "builtin:NAME"
  (tiny, tiny-g2, mamba2-130m, tiny-hybrid, granite-h-bench, tiny-nemotron-h, tiny-bamba, tiny-falcon-h1).
exact: exact mode (the CLI's --exact): logits bit-identical under any schedule, batch mix and
  thread count. mamba_ssm_cache_dtype ("float32" | "bfloat16"), exact_grid (a power of two),
  exact_stagger ("auto" | "none" | "spread") and scan_products ("float32" | "bfloat16" | "split", the
  latter two with device="cuda") are the CLI's numerics flags of the same names.
additional_config: a dict or JSON text, as --additional-config, e.g.
  {"tensor_replacement": {"tensors_path": "ref.safetensors"}} (docs/accuracy.md).
moe_routing: "direct" or "fused" (the same bits either way; see --moe-routing).
max_num_seqs, max_num_batched_tokens, max_model_len, state_memory_mb, gpu_memory_utilization: the
  engine's scheduler and cache limits, as the CLI's flags of the same names (gpu_memory_utilization: a
  share of the GPU's memory for the caches, with device="cuda").
threads: worker threads for this process (default: all cores).
device: "cpu" or "cuda" (GPU 0; needs a CUDA build), dtype: with cuda, "bfloat16" GEMM inputs (default)
  or "float32", as the CLI's --device and --dtype; enforce_eager: with cuda, no CUDA graphs for decode
  steps (the same bits), as the CLI's --enforce-eager.
tensor_parallel_size: split the model over this many ranks, as --tensor-parallel-size (CPU ranks are
  worker threads; with cuda, rank r runs on GPU r % GPU count; docs/tensor-parallel.md).

Every bad input raises parity.Error with the message the CLI would print.)doc";

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "parity's C++ engine (Mamba2 and hybrid models, exact mode, accuracy tools); see docs/python.md.";
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError).attr("__doc__") =
      "Raised for every bad input (files, options, token ids) with the message the CLI prints after 'error:'.";

  bind_captures(m);
  bind_results(m);
  bind_tokenizer(m);

  py::class_<Llm>(m, "LLM", kLlmDoc)
      .def(py::init([](const std::string& model, bool exact, const py::object& additional_config,
                       const std::optional<std::string>& cache_dtype, const std::optional<int>& exact_grid,
                       const std::string& exact_stagger, const std::string& moe_routing, int max_num_seqs,
                       int max_num_batched_tokens, int64_t max_model_len, double state_memory_mb,
                       double gpu_memory_utilization, const std::optional<int>& threads, const std::string& device,
                       const std::optional<std::string>& dtype, int tensor_parallel_size, bool enforce_eager,
                       const std::string& scan_products) {
             LlmOptions o = llm_options(exact, additional_config, cache_dtype, exact_grid, exact_stagger, moe_routing,
                                        max_num_seqs, max_num_batched_tokens, max_model_len, state_memory_mb,
                                        gpu_memory_utilization, threads, device, dtype, tensor_parallel_size,
                                        enforce_eager, scan_products);
             py::gil_scoped_release unlocked;
             return std::make_unique<Llm>(model, std::move(o));
           }),
           py::arg("model"), py::arg("exact") = false, py::arg("additional_config") = py::none(), py::kw_only(),
           py::arg("mamba_ssm_cache_dtype") = py::none(), py::arg("exact_grid") = py::none(),
           py::arg("exact_stagger") = "auto", py::arg("moe_routing") = "direct", py::arg("max_num_seqs") = 8,
           py::arg("max_num_batched_tokens") = 2048, py::arg("max_model_len") = int64_t{1} << 20,
           py::arg("state_memory_mb") = 0.0, py::arg("gpu_memory_utilization") = 0.0, py::arg("threads") = py::none(),
           py::arg("device") = "cpu",
           py::arg("dtype") = py::none(), py::arg("tensor_parallel_size") = 1, py::arg("enforce_eager") = false,
           py::arg("scan_products") = "float32")
      .def_property_readonly("vocab_size", [](const Llm& l) { return l.model().vocab_size(); },
                             "Number of rows of the output embedding (logits per position).")
      .def_property_readonly("origin", [](const Llm& l) { return l.model().origin(); },
                             "The checkpoint folder or builtin:NAME the model came from.")
      .def_property_readonly("exact", [](const Llm& l) { return l.options().numerics.exact; },
                             "True in exact mode.")
      .def_property_readonly(
          "tokenizer",
          [](const Llm& l) { return l.tokenizer(); }, py::return_value_policy::reference_internal,
          "The model's Tokenizer (tokenizer.json in the folder; builtin models have a built-in one), or None. "
          "Where it exists, prompts may be given as text.")
      .def_property_readonly("numerics", [](const Llm& l) { return l.numerics().metadata(); },
                             "The numerics every call runs with, as files record them: {'numerics': 'exact'|'plain', "
                             "'ssm_state_dtype': …, and in exact mode 'exact_grid', 'exact_stagger' (and "
                             "'exact_scan_products' when not float32)}.")
      .def(
          "score",
          [](const Llm& l, const py::object& tokens) {
            const std::vector<int32_t> t = tokens_from(tokens, "score: tokens", prompt_encoder(l));
            std::vector<float> logits;
            {
              py::gil_scoped_release unlocked;
              logits = l.score(t);
            }
            return to_numpy(logits.data(), static_cast<int64_t>(t.size()), l.model().vocab_size());
          },
          py::arg("tokens"),
          R"doc(Logits of every position of one single-shot prefill (the CLI's `score`).

tokens: a list (or 1-D numpy array) of token ids, or a str (encoded with the model's tokenizer,
  special tokens included, as `score --text`).
Returns a float32 array [len(tokens), vocab]; row t is the distribution after tokens[0..t].
Numerics (LLM.numerics): plain mode is the chunked scan at the model's chunk_size; exact mode is
exact mode's grid, so the rows equal what generate(..., forced=...) produces in exact mode under
any schedule. The values equal `parity score` with the same flags bit for bit.)doc")
      .def(
          "generate",
          [](const Llm& l, const py::object& prompts, int max_tokens, float temperature, float top_p, int top_k,
             uint64_t seed, const std::optional<std::vector<int32_t>>& stop_token_ids, int logprobs,
             const py::object& forced, bool return_logits) {
            const auto ps = token_lists_from(prompts, "generate: prompts", prompt_encoder(l));
            std::vector<std::vector<int32_t>> fs;
            if (!forced.is_none()) fs = token_lists_from(forced, "generate: forced", continuation_encoder(l));
            if (fs.size() > 1 && fs.size() != ps.size())
              throw Error("generate: " + std::to_string(fs.size()) + " forced continuations for " +
                          std::to_string(ps.size()) + " prompts (give one shared or one per prompt)");
            if (max_tokens < 1) throw Error("generate: max_tokens must be at least 1");
            if (!(temperature >= 0)) throw Error("generate: temperature must be >= 0");
            if (!(top_p > 0 && top_p <= 1)) throw Error("generate: top_p must be in (0, 1]");
            if (top_k < 0) throw Error("generate: top_k must be >= 0");
            if (logprobs < 0 || logprobs > 100) throw Error("generate: logprobs must be in [0, 100]");
            std::vector<GenerateRequest> reqs;
            for (std::size_t i = 0; i < ps.size(); ++i) {
              GenerateRequest r;
              r.prompt = ps[i];
              if (!fs.empty()) r.forced = fs.size() == 1 ? fs[0] : fs[i];
              r.sampling.max_tokens = max_tokens;
              r.sampling.temperature = temperature;
              r.sampling.top_p = top_p;
              r.sampling.top_k = top_k;
              r.sampling.seed = seed;
              r.sampling.stop_token_ids = stop_token_ids.value_or(std::vector<int32_t>{});
              r.sampling.logprobs = logprobs;
              r.return_logits = return_logits;
              reqs.push_back(std::move(r));
            }
            py::gil_scoped_release unlocked;
            return l.generate(reqs);
          },
          py::arg("prompts"), py::kw_only(), py::arg("max_tokens") = 16, py::arg("temperature") = 0.0f,
          py::arg("top_p") = 1.0f, py::arg("top_k") = 0, py::arg("seed") = 0, py::arg("stop_token_ids") = py::none(),
          py::arg("logprobs") = 0, py::arg("forced") = py::none(), py::arg("return_logits") = false,
          R"doc(Generate (or teacher-force) through the engine (the CLI's `generate`).

prompts: one prompt (a list of token ids, or a str when the model has a tokenizer) or a list of
  prompts; all of them run together in one engine (continuous batching, chunked prefill). In exact
  mode every request gets the bits it gets alone.
max_tokens, temperature (0 = greedy), top_p (1 = off), top_k (0 = off), seed (per request),
stop_token_ids, logprobs (top-N log-probs per token): sampling, as the CLI's flags.
forced: teacher forcing: a list of token ids fed after the prompt instead of sampled ones (one
  shared by every prompt, or one list per prompt); max_tokens is then ignored.
return_logits: also return each request's raw logit rows (CompletionOutput.logits).
Returns a list of CompletionOutput, one per prompt, in order.)doc")
      .def(
          "probes",
          [](const Llm& l) {
            py::list out;
            for (const auto& p : l.model().probe_points()) {
              py::dict d;
              d["name"] = p.name;
              d["cols"] = p.cols;
              d["meaning"] = p.meaning;
              out.append(d);
            }
            return out;
          },
          R"doc(The model's probe points in forward order (the CLI's `probes --json`): a list of dicts
{"name": Hugging Face module name, "cols": feature size, "meaning": one line}. The names are what
capture(modules=...), compare and tensor replacement use.)doc")
      .def(
          "capture",
          [](const Llm& l, const py::object& prompts, const std::vector<std::string>& modules, const py::object& forced,
             std::optional<int> max_tokens, const std::string& layout, const std::optional<std::string>& out) {
            CaptureArgs a;
            a.prompts = token_lists_from(prompts, "capture: prompts", prompt_encoder(l));
            if (!forced.is_none()) a.forced = token_lists_from(forced, "capture: forced", continuation_encoder(l));
            a.max_tokens = max_tokens.value_or(0);
            if (max_tokens && *max_tokens < 1) throw Error("capture: max_tokens must be at least 1");
            a.modules = modules;
            a.layout = layout_of(layout);
            py::gil_scoped_release unlocked;
            accuracy::Captures c = l.capture(a);
            if (out) accuracy::write_captures(*out, c);
            return c;
          },
          py::arg("prompts"), py::arg("modules"), py::kw_only(), py::arg("forced") = py::none(),
          py::arg("max_tokens") = py::none(), py::arg("layout") = "flat", py::arg("out") = py::none(),
          R"doc(Capture named intermediate tensors of requests run through the engine (the CLI's `capture`).

prompts: one prompt or a list of prompts (token id lists, or text with a tokenizer).
modules: probe-point patterns: exact names, layer ranges (backbone.layers.0-3.mixer) or re:REGEX.
forced: teacher-forced continuation, one shared or one per prompt; or max_tokens: generate that
  many greedily (default: the prompt only).
layout: "flat" ([positions, E] per module) or "step" (seed 000's per-step tensors).
out: also write the captures file there.
Returns a Captures object.)doc")
      .def(
          "validate",
          [](const Llm& l, const py::object& reference, std::optional<int> prompt_index, std::optional<int> max_tokens,
             const py::object& tol_map, double divergence_tol) {
            accuracy::Captures ref;
            std::string path;
            if (py::isinstance<accuracy::Captures>(reference)) {
              ref = reference.cast<accuracy::Captures>();
            } else {
              path = reference.cast<std::string>();
              ref = accuracy::read_captures(path);
            }
            ValidateArgs a;
            a.prompt_index = prompt_index;
            if (max_tokens && *max_tokens < 1) throw Error("validate: max_tokens must be at least 1");
            a.max_tokens = max_tokens.value_or(0);
            if (!tol_map.is_none()) a.tol_map = json_text(tol_map);
            a.divergence_tol = divergence_tol;
            py::gil_scoped_release unlocked;
            ValidateResult r = l.validate(ref, a);
            if (!path.empty()) r.report["reference"] = path;
            return r;
          },
          py::arg("reference"), py::kw_only(), py::arg("prompt_index") = py::none(), py::arg("max_tokens") = py::none(),
          py::arg("tol_map") = py::none(), py::arg("divergence_tol") = 0.001,
          R"doc(Teacher-forced logit validation with divergence retry (the CLI's `validate`).

reference: a captures file path or a Captures object with lm_head rows and prompt_token_ids per
  prompt (e.g. tools/capture_hf.py's output).
prompt_index: validate only this prompt; max_tokens: check at most N tokens per prompt;
tol_map: {"5": [atol, rtol], …, "all": [atol, rtol]} (dict or JSON text);
divergence_tol: a divergence passes when ref[expected] - ref[ours] <= this.
Returns a ValidationResult (passed, report, summary, numerics_difference).)doc")
      .def("__repr__", [](const Llm& l) {
        return "<parity.LLM " + l.model().origin() + " " + l.numerics().describe() + ">";
      });
}

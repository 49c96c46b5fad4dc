// The Python module `deepinfer` (pybind11) over the public engine API: an offline LLM(model).generate(prompts,
// SamplingParams(...)) in the shape vLLM and DeepSeek's engine use, plus chat(). All prompts of a call are
// submitted together (Engine::submit_all), so the engine's first step sees them all; the GIL is released while
// the engine works.
// Includes only include/deepinfer/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "deepinfer/engine.h"

namespace py = pybind11;
using deepinfer::Engine;

namespace {

struct PySamplingParams {
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  int max_tokens = 16;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob and the top N
  std::optional<uint64_t> seed;

  deepinfer::SamplingParams to_engine(uint64_t default_seed) const {
    deepinfer::SamplingParams s;
    s.temperature = temperature;
    s.top_p = top_p;
    s.top_k = top_k < 0 ? 0 : top_k;
    s.min_p = min_p;
    s.presence_penalty = presence_penalty;
    s.frequency_penalty = frequency_penalty;
    s.repetition_penalty = repetition_penalty;
    s.max_tokens = max_tokens;
    s.stop = stop;
    s.stop_token_ids = stop_token_ids;
    s.ignore_eos = ignore_eos;
    s.logprobs = logprobs >= 0;
    s.top_logprobs = logprobs > 0 ? logprobs : 0;
    s.seed = seed.value_or(default_seed);
    return s;
  }
};

struct RequestOutput {
  std::string text;       // content (for chat in thinking mode, the answer after the reasoning)
  std::string reasoning;  // chat: reasoning_content
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
};

class LLM {
 public:
  LLM(const std::string& model, int threads, int64_t max_batch_tokens, int64_t cache_budget_mb, int64_t prefix_cache_mb,
      bool exact, const std::string& backend) {
    if (backend != "cpu" && backend != "cuda") throw py::value_error("backend must be 'cpu' or 'cuda', not '" + backend + "'");
    deepinfer::EngineOptions o;
    o.model_dir = model;
    o.n_threads = threads;
    o.max_batch_tokens = max_batch_tokens;
    o.cache_budget_bytes = cache_budget_mb << 20;
    o.prefix_cache_bytes = prefix_cache_mb << 20;
    o.exact = exact;
    o.cuda = backend == "cuda";
    // Offline: a call's prompts all wait in the engine's queue (submit_all takes them together or not at all),
    // and the caller holds them in memory anyway, so the queue has no bound a long prompt list could hit.
    o.max_waiting = std::numeric_limits<int>::max();
    auto engine = Engine::open(o);
    if (!engine.ok()) throw std::runtime_error(engine.status().message());
    engine_ = std::move(engine.value());
  }

  using Prompt = std::variant<std::string, std::vector<int32_t>>;

  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const PySamplingParams& params) {
    std::vector<deepinfer::Request> requests;
    for (const Prompt& p : prompts) {
      deepinfer::Request r;
      if (const auto* text = std::get_if<std::string>(&p)) r.prompt_text = *text;
      else r.prompt_ids = std::get<std::vector<int32_t>>(p);
      requests.push_back(std::move(r));
    }
    return run(std::move(requests), params);
  }

  std::vector<RequestOutput> chat(const py::list& conversations, const PySamplingParams& params) {
    // A conversation: a list of {"role", "content", ...} dicts (OpenAI shape), or a dict with "messages" and
    // the other chat fields (tools, thinking, reasoning_effort).
    py::module_ json = py::module_::import("json");
    std::vector<deepinfer::Request> requests;
    for (const py::handle& c : conversations) {
      py::object body = py::isinstance<py::dict>(c) ? py::reinterpret_borrow<py::object>(c) : py::dict(py::arg("messages") = c);
      deepinfer::Request r;
      r.chat = nlohmann::ordered_json::parse(json.attr("dumps")(body).cast<std::string>());
      requests.push_back(std::move(r));
    }
    return run(std::move(requests), params);
  }

  void shutdown() { engine_->shutdown(true); }

 private:
  std::vector<RequestOutput> run(std::vector<deepinfer::Request> requests, const PySamplingParams& params) {
    for (deepinfer::Request& r : requests) r.sampling = params.to_engine(next_seed_++);
    auto submitted = engine_->submit_all(std::move(requests));
    if (!submitted.ok()) throw py::value_error(submitted.status().message());
    const std::vector<deepinfer::RequestId>& ids = submitted.value();
    std::vector<RequestOutput> outputs(ids.size());
    {
      py::gil_scoped_release release;
      std::vector<deepinfer::Event> events;
      for (size_t i = 0; i < ids.size(); ++i) {
        bool more = true;
        while (more) {
          events.clear();
          more = engine_->poll(ids[i], events, std::chrono::milliseconds(100));
          for (const deepinfer::Event& e : events) {
            RequestOutput& o = outputs[i];
            o.token_ids.insert(o.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
            for (const auto& lp : e.logprobs) o.logprobs.push_back(lp.logprob);
            for (const auto& d : e.deltas) {
              if (d.kind == deepinfer::DeltaKind::kContent) o.text += d.text;
              if (d.kind == deepinfer::DeltaKind::kReasoning) o.reasoning += d.text;
            }
            if (e.finished) {
              o.finish_reason = deepinfer::end_reason_name(e.end_reason);
              o.prompt_tokens = e.usage.prompt_tokens;
              o.cached_tokens = e.usage.cached_tokens;
            }
          }
        }
      }
    }
    return outputs;
  }

  std::unique_ptr<Engine> engine_;
  uint64_t next_seed_ = 1;
};

}  // namespace

PYBIND11_MODULE(deepinfer, m) {
  m.doc() = "deepinfer: DeepSeek-V4 family inference engine (offline LLM API)";
  py::class_<PySamplingParams>(m, "SamplingParams")
      .def(py::init([](float temperature, float top_p, int top_k, float min_p, float presence_penalty, float frequency_penalty,
                       float repetition_penalty, int max_tokens, std::vector<std::string> stop, std::vector<int32_t> stop_token_ids,
                       bool ignore_eos, std::optional<int> logprobs, std::optional<uint64_t> seed) {
             PySamplingParams p;
             p.temperature = temperature, p.top_p = top_p, p.top_k = top_k, p.min_p = min_p;
             p.presence_penalty = presence_penalty, p.frequency_penalty = frequency_penalty, p.repetition_penalty = repetition_penalty;
             p.max_tokens = max_tokens, p.stop = std::move(stop), p.stop_token_ids = std::move(stop_token_ids);
             p.ignore_eos = ignore_eos, p.logprobs = logprobs.value_or(-1), p.seed = seed;
             return p;
           }),
           py::arg("temperature") = 1.0f, py::arg("top_p") = 1.0f, py::arg("top_k") = 0, py::arg("min_p") = 0.0f,
           py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f, py::arg("repetition_penalty") = 1.0f,
           py::arg("max_tokens") = 16, py::arg("stop") = std::vector<std::string>{}, py::arg("stop_token_ids") = std::vector<int32_t>{},
           py::arg("ignore_eos") = false, py::arg("logprobs") = py::none(), py::arg("seed") = py::none())
      .def_readwrite("temperature", &PySamplingParams::temperature)
      .def_readwrite("top_p", &PySamplingParams::top_p)
      .def_readwrite("top_k", &PySamplingParams::top_k)
      .def_readwrite("max_tokens", &PySamplingParams::max_tokens)
      .def_readwrite("seed", &PySamplingParams::seed);
  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("text", &RequestOutput::text)
      .def_readonly("reasoning", &RequestOutput::reasoning)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_readonly("finish_reason", &RequestOutput::finish_reason)
      .def_readonly("prompt_tokens", &RequestOutput::prompt_tokens)
      .def_readonly("cached_tokens", &RequestOutput::cached_tokens)
      .def("__repr__", [](const RequestOutput& o) {
        return "RequestOutput(text=" + py::repr(py::str(o.text)).cast<std::string>() + ", finish_reason='" + o.finish_reason +
               "', tokens=" + std::to_string(o.token_ids.size()) + ")";
      });
  py::class_<LLM>(m, "LLM")
      .def(py::init<const std::string&, int, int64_t, int64_t, int64_t, bool, const std::string&>(), py::arg("model"),
           py::arg("threads") = 0, py::arg("max_batch_tokens") = 256, py::arg("cache_budget_mb") = 2048,
           py::arg("prefix_cache_mb") = 512, py::arg("exact") = false, py::arg("backend") = "cpu")
      .def("generate", &LLM::generate, py::arg("prompts"), py::arg("sampling_params") = PySamplingParams{},
           "Completes each prompt (text, or a list of token ids); all run batched. Returns RequestOutputs in order.")
      .def("chat", &LLM::chat, py::arg("conversations"), py::arg("sampling_params") = PySamplingParams{},
           "Chat with the DeepSeek chat template: each conversation is a list of OpenAI-style messages or a dict "
           "with 'messages' and chat options (tools, thinking, reasoning_effort).")
      .def("shutdown", &LLM::shutdown, py::call_guard<py::gil_scoped_release>());
}

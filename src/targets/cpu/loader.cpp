// Loads a compiled model (.so) with dlopen and runs it on Tensors through the C ABI.
#include "tessel/targets/cpu/loader.h"

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fmt/format.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/abi.h"

namespace tessel::cpu {

struct CompiledModel::Api {
  int32_t (*abiVersion)();
  const char* (*hash)();
  int32_t (*numInputs)();
  int32_t (*numOutputs)();
  const tessel_tensor_desc* (*input)(int32_t);
  const tessel_tensor_desc* (*output)(int32_t);
  tessel_model* (*create)(int32_t);
  int32_t (*run)(tessel_model*, const void* const*, void* const*);
  void (*destroy)(tessel_model*);
  double (*flops)();
  const char* (*isa)();
  int32_t (*numFallbacks)();
  void (*fallback)(int32_t, const char**, int64_t*, const char**, int64_t*);
  void (*setHost)(tessel_model*, tessel_host_fn, void*);
  int32_t (*numSteps)();
  const tessel_step_info* (*step)(int32_t);
  void (*setProfile)(tessel_model*, double*);
  const char* (*error)(const tessel_model*);
};

/// The reference interpreter serving the nodes the model runs through its host.
struct CompiledModel::Fallbacks {
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<Interpreter>> interpreters;

  static int32_t run(void* ctx, int32_t index, const void* const* inputs, void* const* outputs) {
    auto* self = static_cast<Fallbacks*>(ctx);
    try {
      const Graph& g = *self->models.at(static_cast<size_t>(index))->graph;
      std::map<std::string, Tensor> feed;
      for (size_t i = 0; i < g.inputs().size(); ++i) {
        Tensor t(g.inputs()[i]->type.dtype, g.inputs()[i]->type.staticShape());
        std::memcpy(t.rawData(), inputs[i], t.nbytes());
        feed[g.inputs()[i]->name()] = t;
      }
      std::vector<Tensor> outs = self->interpreters[static_cast<size_t>(index)]->run(feed);
      if (outs.size() != g.outputs().size())
        throw UserError(fmt::format("{} output(s), the compiled model expects {}", outs.size(), g.outputs().size()));
      for (size_t i = 0; i < outs.size(); ++i) {
        // The compiled model planned this output's storage for its static shape: anything else would overrun it.
        const TensorType& planned = g.outputs()[i]->type;
        if (outs[i].dtype() != planned.dtype || outs[i].shape() != planned.staticShape())
          throw UserError(fmt::format("output '{}' is {}, the compiled model planned {}", g.outputs()[i]->name(),
                                      outs[i].summary(), planned.toString()));
        std::memcpy(outputs[i], outs[i].rawData(), outs[i].nbytes());
      }
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessel: fallback node %d failed: %s\n", index, e.what());
      return 1;
    }
  }
};

namespace {
template <class Fn>
void bind(void* handle, const char* name, Fn& fn, const std::string& path) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr)
    throw UserError(fmt::format("'{}' is not a model compiled by tessel (no symbol {})", path, name));
}

CompiledTensorInfo infoOf(const tessel_tensor_desc* d) {
  CompiledTensorInfo info;
  info.name = d->name;
  info.dtype = static_cast<DType>(d->dtype);  // ONNX codes, as DType
  info.shape.assign(d->dims, d->dims + d->rank);
  return info;
}
}  // namespace

CompiledModel::CompiledModel(const std::string& path, int numThreads) : path_(path), api_(std::make_unique<Api>()) {
  // A path without a slash would be searched on LD_LIBRARY_PATH; the user means the file.
  std::string openPath = path.find('/') == std::string::npos ? "./" + path : path;
  handle_ = dlopen(openPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw UserError(fmt::format("cannot load '{}': {}", path, dlerror()));
  try {
    bind(handle_, "tessel_abi_version", api_->abiVersion, path);
    if (api_->abiVersion() != TESSEL_ABI_VERSION)
      throw UserError(fmt::format("'{}' was compiled for model ABI {}, this tessel reads ABI {}; recompile it", path,
                                  api_->abiVersion(), TESSEL_ABI_VERSION));
    bind(handle_, "tessel_model_hash", api_->hash, path);
    bind(handle_, "tessel_model_num_inputs", api_->numInputs, path);
    bind(handle_, "tessel_model_num_outputs", api_->numOutputs, path);
    bind(handle_, "tessel_model_input", api_->input, path);
    bind(handle_, "tessel_model_output", api_->output, path);
    bind(handle_, "tessel_model_create", api_->create, path);
    bind(handle_, "tessel_model_run", api_->run, path);
    bind(handle_, "tessel_model_destroy", api_->destroy, path);
    bind(handle_, "tessel_model_flops", api_->flops, path);
    bind(handle_, "tessel_model_num_fallbacks", api_->numFallbacks, path);
    bind(handle_, "tessel_model_fallback", api_->fallback, path);
    bind(handle_, "tessel_model_set_host", api_->setHost, path);
    bind(handle_, "tessel_model_num_steps", api_->numSteps, path);
    bind(handle_, "tessel_model_step", api_->step, path);
    bind(handle_, "tessel_model_set_profile", api_->setProfile, path);
    bind(handle_, "tessel_model_error", api_->error, path);
    hash_ = api_->hash();
    flops_ = api_->flops();
    // Optional (libraries compiled before it have none).
    api_->isa = reinterpret_cast<const char* (*)()>(dlsym(handle_, "tessel_model_isa"));
    isa_ = api_->isa ? api_->isa() : "";
    for (int32_t i = 0; i < api_->numInputs(); ++i) inputs_.push_back(infoOf(api_->input(i)));
    for (int32_t i = 0; i < api_->numOutputs(); ++i) outputs_.push_back(infoOf(api_->output(i)));
    for (int32_t i = 0; i < api_->numSteps(); ++i) {
      const tessel_step_info* st = api_->step(i);
      steps_.push_back({st->node, st->op, st->kernel, Shape(st->dims, st->dims + st->rank), st->flops});
    }
    instance_ = api_->create(numThreads);
    if (instance_ == nullptr)
      throw UserError(fmt::format("cannot run '{}': the CPU lacks AVX2/FMA{} or memory ran out", path,
                                  isa_ == "avx512" ? " or AVX-512F (the library was built for it)" : ""));
    if (api_->numFallbacks() > 0) {
      fallbacks_ = std::make_unique<Fallbacks>();
      for (int32_t i = 0; i < api_->numFallbacks(); ++i) {
        const char *text, *side;
        int64_t textBytes, sideBytes;
        api_->fallback(i, &text, &textBytes, &side, &sideBytes);
        fallbacks_->models.push_back(parseModelText(std::string_view(text, static_cast<size_t>(textBytes)),
                                                    path + fmt::format(":fallback{}", i),
                                                    std::string_view(side, static_cast<size_t>(sideBytes))));
        fallbacks_->interpreters.push_back(std::make_unique<Interpreter>(*fallbacks_->models.back()->graph));
      }
      api_->setHost(static_cast<tessel_model*>(instance_), &Fallbacks::run, fallbacks_.get());
    }
  } catch (...) {
    dlclose(handle_);
    throw;
  }
}

CompiledModel::~CompiledModel() {
  if (instance_) api_->destroy(static_cast<tessel_model*>(instance_));
  if (handle_) dlclose(handle_);
}

std::vector<Tensor> CompiledModel::run(const std::map<std::string, Tensor>& inputs) {
  std::vector<const void*> in;
  for (const CompiledTensorInfo& info : inputs_) {
    auto it = inputs.find(info.name);
    if (it == inputs.end()) throw UserError(fmt::format("missing input '{}' ({})", info.name, shapeToString(info.shape)));
    if (it->second.dtype() != info.dtype || it->second.shape() != info.shape)
      throw UserError(fmt::format("input '{}': expected {} {}, got {} {}", info.name, dtypeName(info.dtype),
                                  shapeToString(info.shape), dtypeName(it->second.dtype()),
                                  shapeToString(it->second.shape())));
    in.push_back(it->second.rawData());
  }
  std::vector<Tensor> outs;
  std::vector<void*> out;
  for (const CompiledTensorInfo& info : outputs_) {
    outs.emplace_back(info.dtype, info.shape);
    out.push_back(outs.back().rawData());
  }
  runRaw(in.data(), out.data());
  return outs;
}

void CompiledModel::setProfile(double* ns) { api_->setProfile(static_cast<tessel_model*>(instance_), ns); }

void CompiledModel::runRaw(const void* const* inputs, void* const* outputs) {
  auto* m = static_cast<tessel_model*>(instance_);
  if (api_->run(m, inputs, outputs) != 0) throw UserError(fmt::format("running '{}' failed: {}", path_, api_->error(m)));
}

}  // namespace tessel::cpu

// Loads a compiled model (.so) with dlopen and runs it on Tensors through the C ABI.
#include "tessel/targets/cpu/loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

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
  info.dtype = DType::Float32;
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
    hash_ = api_->hash();
    flops_ = api_->flops();
    for (int32_t i = 0; i < api_->numInputs(); ++i) inputs_.push_back(infoOf(api_->input(i)));
    for (int32_t i = 0; i < api_->numOutputs(); ++i) outputs_.push_back(infoOf(api_->output(i)));
    instance_ = api_->create(numThreads);
    if (instance_ == nullptr)
      throw UserError(fmt::format("cannot run '{}': the CPU lacks AVX2/FMA or memory ran out", path));
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
    if (it->second.dtype() != DType::Float32 || it->second.shape() != info.shape)
      throw UserError(fmt::format("input '{}': expected float32 {}, got {} {}", info.name, shapeToString(info.shape),
                                  dtypeName(it->second.dtype()), shapeToString(it->second.shape())));
    in.push_back(it->second.rawData());
  }
  std::vector<Tensor> outs;
  std::vector<void*> out;
  for (const CompiledTensorInfo& info : outputs_) {
    outs.emplace_back(DType::Float32, info.shape);
    out.push_back(outs.back().rawData());
  }
  runRaw(in.data(), out.data());
  return outs;
}

void CompiledModel::runRaw(const void* const* inputs, void* const* outputs) {
  api_->run(static_cast<tessel_model*>(instance_), inputs, outputs);
}

}  // namespace tessel::cpu

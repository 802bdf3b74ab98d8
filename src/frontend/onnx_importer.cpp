// ONNX protobuf -> graph IR: values, initializers, nested graphs, attributes, opset upgrade, inference.
#include "tessel/frontend/onnx_importer.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <onnx/onnx_pb.h>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

#include "tessel/frontend/tensor_io.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/registry.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

std::string normalizeDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

class OnnxImporter {
 public:
  OnnxImporter(std::string name, std::string baseDir) : name_(std::move(name)), baseDir_(std::move(baseDir)) {}

  std::unique_ptr<Model> import(const onnx::ModelProto& proto, const ImportOptions& options) {
    auto model = std::make_unique<Model>();
    model->producerName = proto.producer_name();
    model->irVersion = proto.ir_version();
    for (const auto& op : proto.opset_import()) model->opsetImports[normalizeDomain(op.domain())] = op.version();
    if (proto.opset_import_size() == 0) model->opsetImports[""] = proto.ir_version() >= 3 ? 1 : 1;
    if (!proto.has_graph()) throw UserError(fmt::format("'{}': the model has no graph (truncated or not an ONNX model?)", name_));
    int64_t opset = model->opsetImports.count("") ? model->opsetImports.at("") : 0;
    if (model->opsetImports.count("") && (opset < kMinOpset || opset > kMaxOpset))
      throw UserError(fmt::format("'{}': ai.onnx opset {} is not supported (Tessel imports opsets {} to {})", name_, opset,
                                  kMinOpset, kMaxOpset));
    opsets_ = model->opsetImports;
    model->graph = importGraph(proto.graph(), nullptr);
    std::vector<std::string> unsupported = unsupportedOperators(*model->graph);
    if (!unsupported.empty())
      throw UserError(fmt::format("'{}': {} unsupported operator type{}: {}", name_, unsupported.size(),
                                  unsupported.size() > 1 ? "s" : "", fmt::join(unsupported, "; ")));
    upgradeGraph(*model->graph);
    verifyOrThrow(*model->graph);
    applyInputShapes(*model->graph, options.inputShapes);
    fixOpenInputDims(*model->graph, options);
    inferShapesWithMode(*model->graph, options.inference);
    return model;
  }

 private:
  TensorType typeFromProto(const onnx::TypeProto& t, const std::string& what) {
    if (t.value_case() == onnx::TypeProto::VALUE_NOT_SET) return {};
    if (!t.has_tensor_type())
      throw UserError(fmt::format("'{}': {} is not a tensor (sequence, map and optional values are not supported yet)", name_, what));
    const auto& tt = t.tensor_type();
    TensorType out;
    out.dtype = static_cast<DType>(tt.elem_type());
    if (tt.elem_type() < 0 || tt.elem_type() > 16)
      throw UserError(fmt::format("'{}': {} has unsupported element type {}", name_, what, tt.elem_type()));
    if (tt.has_shape()) {
      std::vector<Dim> dims;
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value() && d.dim_value() >= 0) dims.push_back(Dim::known(d.dim_value()));
        else if (d.has_dim_param() && !d.dim_param().empty()) dims.push_back(Dim::symbolic(d.dim_param()));
        else dims.push_back(Dim::unknown());
      }
      out.dims = std::move(dims);
    }
    return out;
  }

  AttrValue attrFromProto(const onnx::AttributeProto& a, Graph& owner, const std::string& nodeDesc) {
    auto type = a.type();
    if (type == onnx::AttributeProto::UNDEFINED) {  // very old models leave the type implicit
      if (a.has_f()) type = onnx::AttributeProto::FLOAT;
      else if (a.has_i()) type = onnx::AttributeProto::INT;
      else if (a.has_s()) type = onnx::AttributeProto::STRING;
      else if (a.has_t()) type = onnx::AttributeProto::TENSOR;
      else if (a.has_g()) type = onnx::AttributeProto::GRAPH;
      else if (a.floats_size()) type = onnx::AttributeProto::FLOATS;
      else if (a.ints_size()) type = onnx::AttributeProto::INTS;
      else if (a.strings_size()) type = onnx::AttributeProto::STRINGS;
      else type = onnx::AttributeProto::INTS;
    }
    std::string what = fmt::format("{} attribute '{}'", nodeDesc, a.name());
    switch (type) {
      case onnx::AttributeProto::FLOAT: return a.f();
      case onnx::AttributeProto::INT: return static_cast<int64_t>(a.i());
      case onnx::AttributeProto::STRING: return a.s();
      case onnx::AttributeProto::TENSOR: return tensorFromProto(a.t(), baseDir_, what);
      case onnx::AttributeProto::GRAPH: {
        std::shared_ptr<Graph> g = importGraph(a.g(), &owner);
        return g;
      }
      case onnx::AttributeProto::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
      case onnx::AttributeProto::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case onnx::AttributeProto::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
      case onnx::AttributeProto::TENSORS: {
        std::vector<Tensor> ts;
        for (const auto& t : a.tensors()) ts.push_back(tensorFromProto(t, baseDir_, what));
        return ts;
      }
      case onnx::AttributeProto::GRAPHS: {
        std::vector<std::shared_ptr<Graph>> gs;
        for (const auto& g : a.graphs()) gs.push_back(importGraph(g, &owner));
        return gs;
      }
      default:
        throw UserError(fmt::format("'{}': {} has an unsupported kind (sparse tensors and type protos are not supported)", name_, what));
    }
  }

  /// Orders NodeProtos so that producers come first; throws on cycles.
  std::vector<int> orderNodes(const onnx::GraphProto& g) {
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output())
        if (!o.empty()) {
          if (producer.count(o))
            throw UserError(fmt::format("'{}': value '{}' is produced by two nodes ('{}' and '{}')", name_, o,
                                        g.node(producer[o]).name(), g.node(i).name()));
          producer[o] = i;
        }
    std::vector<std::vector<int>> succ(static_cast<size_t>(g.node_size()));
    std::vector<int> indeg(static_cast<size_t>(g.node_size()), 0);
    for (int i = 0; i < g.node_size(); ++i) {
      std::set<int> preds;
      std::vector<std::string> reads(g.node(i).input().begin(), g.node(i).input().end());
      collectSubgraphReads(g.node(i), reads);
      for (const auto& in : reads)
        if (auto it = producer.find(in); it != producer.end() && it->second != i) preds.insert(it->second);
        else if (it != producer.end() && it->second == i)
          throw UserError(fmt::format("'{}': node '{}' ({}) reads its own output '{}' (a cycle)", name_, g.node(i).name(), g.node(i).op_type(), in));
      for (int p : preds) {
        succ[static_cast<size_t>(p)].push_back(i);
        ++indeg[static_cast<size_t>(i)];
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (int i = 0; i < g.node_size(); ++i)
      if (indeg[static_cast<size_t>(i)] == 0) ready.push(i);
    std::vector<int> order;
    while (!ready.empty()) {
      int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int s : succ[static_cast<size_t>(i)])
        if (--indeg[static_cast<size_t>(s)] == 0) ready.push(s);
    }
    if (static_cast<int>(order.size()) != g.node_size()) {
      std::vector<std::string> stuck;
      for (int i = 0; i < g.node_size(); ++i)
        if (indeg[static_cast<size_t>(i)] > 0) stuck.push_back(fmt::format("'{}' ({})", g.node(i).name(), g.node(i).op_type()));
      throw UserError(fmt::format("'{}': graph '{}' has a cycle through {} node(s): {}", name_, g.name(), stuck.size(), fmt::join(stuck, ", ")));
    }
    return order;
  }

  static void collectSubgraphReads(const onnx::NodeProto& n, std::vector<std::string>& reads) {
    for (const auto& a : n.attribute()) {
      auto walk = [&](const onnx::GraphProto& g) {
        for (const auto& inner : g.node()) {
          reads.insert(reads.end(), inner.input().begin(), inner.input().end());
          collectSubgraphReads(inner, reads);
        }
      };
      if (a.has_g()) walk(a.g());
      for (const auto& g : a.graphs()) walk(g);
    }
  }

  std::unique_ptr<Graph> importGraph(const onnx::GraphProto& gp, Graph* parent) {
    auto g = std::make_unique<Graph>(gp.name().empty() ? (parent ? "body" : "main") : gp.name());
    g->setParent(parent);
    std::unordered_map<std::string, const onnx::TensorProto*> inits;
    for (const auto& t : gp.initializer()) {
      if (t.name().empty()) throw UserError(fmt::format("'{}': graph '{}' has an initializer without a name", name_, g->name()));
      if (inits.count(t.name())) throw UserError(fmt::format("'{}': initializer '{}' is defined twice", name_, t.name()));
      inits[t.name()] = &t;
    }
    if (gp.sparse_initializer_size() > 0)
      throw UserError(fmt::format("'{}': sparse initializers are not supported (graph '{}')", name_, g->name()));
    for (const auto& in : gp.input()) {
      if (g->findValue(in.name())) throw UserError(fmt::format("'{}': graph input '{}' is declared twice", name_, in.name()));
      Value* v = g->addInput(in.name(), typeFromProto(in.type(), fmt::format("input '{}'", in.name())));
      if (auto it = inits.find(in.name()); it != inits.end()) {
        TensorType declared = v->type;
        v->setConstant(tensorFromProto(*it->second, baseDir_, fmt::format("initializer '{}'", in.name())));
        (void)declared;
      }
    }
    for (const auto& t : gp.initializer()) {
      if (g->findValue(t.name())) continue;  // an input with a default value
      g->addConstant(t.name(), tensorFromProto(t, baseDir_, fmt::format("initializer '{}'", t.name())));
    }
    std::unordered_map<std::string, TensorType> declaredTypes;
    for (const auto& vi : gp.value_info())
      if (vi.type().has_tensor_type()) declaredTypes[vi.name()] = typeFromProto(vi.type(), fmt::format("value '{}'", vi.name()));
    for (int idx : orderNodes(gp)) {
      const onnx::NodeProto& np = gp.node(idx);
      std::vector<Value*> inputs;
      for (const auto& in : np.input()) {
        if (in.empty()) {
          inputs.push_back(nullptr);
          continue;
        }
        Value* v = g->findValue(in);
        if (!v) {
          if (!parent || !parent->lookup(in))
            throw UserError(fmt::format("'{}': node '{}' ({}) reads '{}', which is not an input, an initializer or the output of any node",
                                        name_, np.name(), np.op_type(), in));
          v = g->addValue(in);  // captured from an enclosing graph
        }
        inputs.push_back(v);
      }
      std::vector<std::string> outputs(np.output().begin(), np.output().end());
      for (const auto& o : outputs)
        if (!o.empty() && g->findValue(o))
          throw UserError(fmt::format("'{}': node '{}' ({}) redefines value '{}'", name_, np.name(), np.op_type(), o));
      std::string nodeName = np.name().empty() ? g->uniqueName(np.op_type() + "_" + std::to_string(idx)) : np.name();
      Node* node = g->addNode(np.op_type(), inputs, outputs, nodeName, normalizeDomain(np.domain()));
      for (const auto& a : np.attribute()) {
        if (a.name().empty()) throw UserError(fmt::format("'{}': {} has an attribute without a name", name_, node->describe()));
        if (!a.ref_attr_name().empty())
          throw UserError(fmt::format("'{}': {} uses a reference attribute (functions are not supported)", name_, node->describe()));
        node->setAttr(a.name(), attrFromProto(a, *g, node->describe()));
      }
      for (Value* o : node->outputs())
        if (o) {
          if (auto it = declaredTypes.find(o->name()); it != declaredTypes.end()) o->type = it->second;
        }
    }
    for (const auto& out : gp.output()) {
      Value* v = g->findValue(out.name());
      if (!v) {
        if (parent && parent->lookup(out.name())) {
          v = g->addValue(out.name());  // a body that passes an outer value through
        } else {
          throw UserError(fmt::format("'{}': graph output '{}' is not produced by any node", name_, out.name()));
        }
      }
      TensorType declared = typeFromProto(out.type(), fmt::format("output '{}'", out.name()));
      if (v->type.dtype == DType::Undefined) v->type = declared;
      g->addOutput(v);
    }
    return g;
  }

  void upgradeGraph(Graph& g) {
    // Copy the node list first: upgrades may add constants but never nodes.
    std::vector<Node*> nodes;
    for (const auto& n : g.nodes()) nodes.push_back(n.get());
    for (Node* n : nodes) {
      for (Graph* sub : n->subgraphs()) upgradeGraph(*sub);
      const OpDef* def = n->def();
      if (!def) continue;
      int64_t version = opsets_.count(n->domain()) ? opsets_.at(n->domain()) : kMaxOpset;
      if (version < def->sinceVersion)
        throw UserError(fmt::format("'{}': {} is at opset {}, but Tessel's {} needs opset {} or newer", name_, n->describe(),
                                    version, n->opType(), def->sinceVersion));
      if (def->upgradeFn) {
        UpgradeContext ctx{*n, version, g};
        def->upgradeFn(ctx);
      }
    }
  }

  std::string name_, baseDir_;
  std::map<std::string, int64_t> opsets_;
};

}  // namespace

void inferShapesWithMode(Graph& graph, InferenceMode mode) {
  if (mode == InferenceMode::Off) return;
  try {
    inferShapes(graph);
  } catch (const UserError& e) {
    if (mode == InferenceMode::Strict) throw;
    std::cerr << "tessel: warning: shape inference stopped: " << e.what() << "\n";
  }
}

std::pair<std::string, Shape> parseInputShapeSpec(const std::string& spec) {
  auto colon = spec.rfind(':');
  auto fail = [&]() -> UserError {
    return UserError(fmt::format("bad --input-shape '{}': expected NAME:DIMS like 'input:1x3x224x224' (use 'NAME:' for a scalar)", spec));
  };
  if (colon == std::string::npos || colon == 0) throw fail();
  Shape shape;
  std::string dims = spec.substr(colon + 1);
  std::stringstream ss(dims);
  std::string part;
  while (!dims.empty() && std::getline(ss, part, 'x')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) throw fail();
    shape.push_back(std::stoll(part));
  }
  return {spec.substr(0, colon), shape};
}

void applyInputShapes(Graph& graph, const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes) {
    Value* v = graph.findValue(name);
    if (!v || !v->isGraphInput()) {
      std::vector<std::string> names;
      for (Value* in : graph.inputs())
        if (!in->isConstant()) names.push_back("'" + in->name() + "'");
      throw UserError(fmt::format("--input-shape names '{}', which is not an input of the model (inputs: {})", name, fmt::join(names, ", ")));
    }
    if (v->type.hasRank() && v->type.rank() != shape.size())
      throw UserError(fmt::format("--input-shape {}: the model declares rank {} ({}), the override has rank {}", name,
                                  v->type.rank(), v->type.toString(), shape.size()));
    if (v->type.hasRank())
      for (size_t i = 0; i < shape.size(); ++i) {
        const Dim& d = (*v->type.dims)[i];
        if (d.isKnown() && d.value != shape[i])
          throw UserError(fmt::format("--input-shape {}: axis {} is fixed to {} by the model, not {}", name, i, d.value, shape[i]));
      }
    v->type = TensorType::fromShape(v->type.dtype, shape);
  }
}

void fixOpenInputDims(Graph& graph, const ImportOptions& options) {
  for (Value* v : graph.inputs()) {
    if (v->isConstant() || !v->type.hasRank() || v->type.isStatic() || options.inputShapes.count(v->name())) continue;
    auto given = options.givenInputShapes.find(v->name());
    if (given != options.givenInputShapes.end()) {
      bool fits = given->second.size() == v->type.rank();
      for (size_t i = 0; fits && i < given->second.size(); ++i) {
        const Dim& d = (*v->type.dims)[i];
        fits = !d.isKnown() || d.value == given->second[i];
      }
      if (fits) v->type = TensorType::fromShape(v->type.dtype, given->second);
      continue;
    }
    if (!options.defaultDimValue) continue;
    std::vector<std::string> open;
    Shape fixed;
    for (size_t i = 0; i < v->type.rank(); ++i) {
      const Dim& d = (*v->type.dims)[i];
      if (!d.isKnown()) open.push_back(!d.symbol.empty() ? fmt::format("'{}' (axis {})", d.symbol, i) : fmt::format("axis {}", i));
      fixed.push_back(d.isKnown() ? d.value : *options.defaultDimValue);
    }
    std::string before = v->type.toString();
    v->type = TensorType::fromShape(v->type.dtype, fixed);
    if (options.note)
      options.note(fmt::format("input '{}' {} has undefined dimension{} {}; using {} ({}); set it with --input-shape {}:{}",
                               v->name(), before, open.size() > 1 ? "s" : "", fmt::join(open, ", "),
                               *options.defaultDimValue, v->type.toString(), v->name(), fmt::join(fixed, "x")));
  }
}

std::unique_ptr<Model> importOnnxBytes(const std::string& bytes, const std::string& name, const std::string& baseDir,
                                       const ImportOptions& options) {
  onnx::ModelProto proto;
  if (bytes.empty()) throw UserError(fmt::format("'{}' is empty, not an ONNX model", name));
  if (!proto.ParseFromString(bytes))
    throw UserError(fmt::format("'{}' is not a valid ONNX model: the protobuf data is corrupt or truncated ({} bytes)", name, bytes.size()));
  return OnnxImporter(name, baseDir).import(proto, options);
}

std::unique_ptr<Model> importOnnxFile(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw UserError(fmt::format("cannot open model '{}': no such file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot open model '{}': {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return importOnnxBytes(ss.str(), path, dir.empty() ? "." : dir, options);
}

}  // namespace tessel

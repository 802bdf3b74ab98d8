// Graphviz rendering of a partitioned graph: one cluster per tessel.Subgraph node, one colour per device.
#include <fmt/format.h>
#include <map>

#include "tessel/partition/partitioner.h"

namespace tessel::partition {
namespace {

/// A Graphviz quoted string; a newline becomes Graphviz's line break "\n" (escaping its backslash would
/// print a literal \n in the label).
std::string dotQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

/// A fill colour per device, remembered in `legend` (device -> colour): accelerators (the devices of subgraph
/// nodes) from the palette, the host (top-level nodes, whatever its device is called) grey.
const char* colourFor(const std::string& device, bool accelerator, std::map<std::string, int>& seen,
                      std::map<std::string, std::string>& legend) {
  static const char* palette[] = {"lightblue", "palegreen", "khaki", "plum", "lightsalmon"};
  const char* colour = "lightgrey";
  if (accelerator) {
    auto it = seen.emplace(device, static_cast<int>(seen.size())).first;
    colour = palette[it->second % 5];
  }
  legend[device.empty() ? "cpu" : device] = colour;
  return colour;
}

}  // namespace

std::string partitionDot(const Graph& graph) {
  std::string out = fmt::format("digraph {} {{\n  rankdir=TB;\n  node [shape=box, style=filled];\n", dotQuoted(graph.name()));
  std::map<std::string, int> colours;
  std::map<std::string, std::string> legend;
  std::map<std::string, std::string> producerId;  // value name -> dot node id
  for (const Value* in : graph.inputs()) {
    std::string id = "in_" + in->name();
    out += fmt::format("  {} [shape=ellipse, style=solid, label={}];\n", dotQuoted(id), dotQuoted(in->name()));
    producerId[in->name()] = id;
  }
  std::vector<std::pair<std::string, std::string>> edges;  // value name, consumer id
  int clusterIndex = 0;
  for (const auto& n : graph.nodes()) {
    if (isSubgraphNode(*n)) {
      const Graph& body = n->attrGraph("body");
      out += fmt::format("  subgraph cluster_{} {{\n    label={};\n    style=rounded; color=blue;\n", clusterIndex++,
                         dotQuoted(fmt::format("{} on {}", n->name(), n->device)));
      for (const auto& b : body.nodes()) {
        std::string id = n->name() + "/" + b->name();
        out += fmt::format("    {} [label={}, fillcolor={}];\n", dotQuoted(id), dotQuoted(b->name() + "\n" + b->opType()),
                           colourFor(n->device, true, colours, legend));
        for (const Value* o : b->outputs())
          if (o) producerId[o->name()] = id;  // body outputs keep the outer names
        for (const Value* in : b->inputs())
          if (in && !in->isConstant()) edges.push_back({in->name(), id});
      }
      out += "  }\n";
      continue;
    }
    std::string id = n->name();
    out += fmt::format("  {} [label={}, fillcolor={}];\n", dotQuoted(id), dotQuoted(n->name() + "\n" + n->opType()),
                       colourFor(n->device, false, colours, legend));
    for (const Value* o : n->outputs())
      if (o) producerId[o->name()] = id;
    for (const Value* in : n->inputs())
      if (in && !in->isConstant()) edges.push_back({in->name(), id});
  }
  for (const Value* o : graph.outputs()) {
    std::string id = "out_" + o->name();
    out += fmt::format("  {} [shape=ellipse, style=solid, label={}];\n", dotQuoted(id), dotQuoted(o->name()));
    edges.push_back({o->name(), id});
  }
  for (const auto& [value, consumer] : edges)
    if (auto it = producerId.find(value); it != producerId.end() && it->second != consumer)
      out += fmt::format("  {} -> {} [label={}];\n", dotQuoted(it->second), dotQuoted(consumer), dotQuoted(value));
  out += "  subgraph cluster_legend {\n    label=\"devices\";\n    style=dashed;\n";
  for (const auto& [device, colour] : legend)
    out += fmt::format("    {} [label={}, fillcolor={}];\n", dotQuoted("legend_" + device), dotQuoted(device), colour);
  return out + "  }\n}\n";
}

}  // namespace tessel::partition

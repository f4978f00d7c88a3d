// graph.hpp — a model's inference forward pass as a list of operations on named values, for
// exporters (rt-export writes it as ONNX): what each layer computes, its settings and whose
// tensors it reads (a layer's are `<layer>.weight`, `.bias`, `.running_mean`, `.running_var`);
// no backend or file-format type.
#pragma once

#include <string>
#include <vector>

namespace ringtrain::nn {

enum class GraphOp {
  kConv,       // weight [O, I, k, k], bias [O] when `bias`
  kBatchNorm,  // inference: (x - running_mean) / sqrt(running_var + eps) * weight + bias
  kRelu,
  kMaxPool,        // kernel, stride, padding (floor of the output size)
  kAvgPool,        // the same; the padding counts in the average
  kGlobalAvgPool,  // [N, C, H, W] -> [N, C, 1, 1]
  kFlatten,        // [N, ...] -> [N, C*H*W], in NCHW order
  kLinear,         // x [N, F] (a 4-D input flattened first) times weight [O, F]^T + bias [O]
  kAdd,            // inputs[0] + inputs[1]
};

struct GraphNode {
  GraphOp op = GraphOp::kRelu;
  std::string layer;                // the layer whose tensors the node reads
  std::vector<std::string> inputs;  // value names
  std::string output;               // a new value name, set by Graph::add
  int kernel = 0, stride = 1, padding = 0;
  bool bias = false;
  float eps = 1e-5f;
};

// The values a model's trace ends in: the class logits and, with inspection heads, the defect,
// pass and zone logits ("" without them).
struct TracedOutputs {
  std::string logits, defects, pass, zones;
};

class Graph {
 public:
  // Appends `node`, names its output (`<layer>:<n>`, unique) and returns that name.
  std::string add(GraphNode node);
  const std::vector<GraphNode>& nodes() const { return nodes_; }

 private:
  std::vector<GraphNode> nodes_;
};

}  // namespace ringtrain::nn

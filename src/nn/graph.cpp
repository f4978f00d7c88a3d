// graph.cpp — Graph, and each layer's trace(): the inference forward pass, node by node, as
// forward() computes it (fused ReLUs as their own nodes).
#include "ringtrain/nn/graph.hpp"

#include "ringtrain/nn/inspect_heads.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain::nn {

std::string Graph::add(GraphNode node) {
  node.output = node.layer + ":" + std::to_string(nodes_.size());
  nodes_.push_back(std::move(node));
  return nodes_.back().output;
}

namespace {

GraphNode node_of(GraphOp op, const std::string& layer, const std::string& input) {
  GraphNode node;
  node.op = op;
  node.layer = layer;
  node.inputs = {input};
  return node;
}

std::string unary(Graph& graph, GraphOp op, const std::string& layer, const std::string& input) {
  return graph.add(node_of(op, layer, input));
}

}  // namespace

std::string Conv2d::trace(Graph& graph, const std::string& input) const {
  GraphNode node = node_of(GraphOp::kConv, name_, input);
  node.kernel = spec_.kernel;
  node.stride = spec_.stride;
  node.padding = spec_.padding;
  node.bias = spec_.bias;
  const std::string out = graph.add(std::move(node));
  return spec_.fuse_relu ? unary(graph, GraphOp::kRelu, name_, out) : out;
}

std::string BatchNorm2d::trace(Graph& graph, const std::string& input) const {
  GraphNode node = node_of(GraphOp::kBatchNorm, name_, input);
  node.eps = eps_;
  const std::string out = graph.add(std::move(node));
  return fuse_relu_ ? unary(graph, GraphOp::kRelu, name_, out) : out;
}

std::string ReLU::trace(Graph& graph, const std::string& input) const {
  return unary(graph, GraphOp::kRelu, name_, input);
}

std::string Pool2d::trace(Graph& graph, const std::string& input) const {
  const GraphOp op = spec_.global                            ? GraphOp::kGlobalAvgPool
                     : spec_.kind == backend::PoolKind::kMax ? GraphOp::kMaxPool
                                                             : GraphOp::kAvgPool;
  GraphNode node = node_of(op, name_, input);
  node.kernel = spec_.kernel;
  node.stride = spec_.stride;
  node.padding = spec_.padding;
  return graph.add(std::move(node));
}

std::string Flatten::trace(Graph& graph, const std::string& input) const {
  return unary(graph, GraphOp::kFlatten, name_, input);
}

std::string Linear::trace(Graph& graph, const std::string& input) const {
  GraphNode node = node_of(GraphOp::kLinear, name_, input);
  node.bias = spec_.bias;
  return graph.add(std::move(node));
}

std::string Sequential::trace(Graph& graph, const std::string& input) const {
  std::string value = input;
  for (const auto& layer : layers_) value = layer->trace(graph, value);
  return value;
}

std::string BasicBlock::trace(Graph& graph, const std::string& input) const {
  std::string main = conv1_.trace(graph, input);
  main = bn1_.trace(graph, main);
  main = conv2_.trace(graph, main);
  main = bn2_.trace(graph, main);
  std::string shortcut = input;
  if (down_conv_) shortcut = down_bn_->trace(graph, down_conv_->trace(graph, input));
  GraphNode add = node_of(GraphOp::kAdd, name_, main);
  add.inputs.push_back(shortcut);
  return unary(graph, GraphOp::kRelu, name_, graph.add(std::move(add)));
}

TracedOutputs InspectHeads::trace(Graph& graph, const std::string& features) const {
  TracedOutputs out;
  out.logits = classifier_->trace(graph, features);
  out.defects = head_defects_.trace(graph, features);
  out.pass = head_pass_.trace(graph, features);
  out.zones = head_zones_.trace(graph, features);
  return out;
}

TracedOutputs Model::trace(Graph& graph, const std::string& input) const {
  const std::string backbone = net_->trace(graph, input);
  if (inspect_) return inspect_->trace(graph, backbone);
  return TracedOutputs{backbone, "", "", ""};
}

}  // namespace ringtrain::nn

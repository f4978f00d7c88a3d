// inference_plan.cpp — InferencePlan: the model's trace grouped into fused steps, the folded
// weights, and the pass that runs them.
#include "ringtrain/nn/inference_plan.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/graph.hpp"

namespace ringtrain::nn {

struct InferencePlan::Step {
  GraphOp op = GraphOp::kRelu;
  std::vector<int> inputs;  // value slots
  int output = -1;
  int residual = -1;               // a conv's: the slot its sum post-op adds
  bool residual_in_place = false;  // nothing reads the residual later: accumulate into it
  const Tensor* weight = nullptr;  // the model's tensors, or the folded ones below
  const Tensor* bias = nullptr;
  const Tensor* mean = nullptr;  // a batch norm's running statistics
  const Tensor* var = nullptr;
  Tensor folded_weight, folded_bias;
  std::unique_ptr<backend::ConvOp> conv;
  std::unique_ptr<backend::LinearOp> linear;
  std::unique_ptr<backend::BatchNormOp> bn;
  std::unique_ptr<backend::ReluOp> relu;
  std::unique_ptr<backend::PoolOp> pool;
  std::unique_ptr<backend::AddOp> add;
};

namespace {

constexpr int kModelOutput = -2;  // a reader that is no node: the value leaves the plan

// Graph nodes that run as one step, the last of which (anchor) produces its output.
struct Group {
  int conv = -1, bn = -1, relu = -1, add = -1;  // node indices, -1 where absent
  std::vector<int> nodes;
  int anchor() const { return *std::max_element(nodes.begin(), nodes.end()); }
};

}  // namespace

struct InferencePlan::Builder {
  InferencePlan& plan;
  Model& model;
  const std::vector<GraphNode>& nodes;
  std::unordered_map<std::string, const Tensor*> tensors;  // the model's, by full name
  std::unordered_map<std::string, std::vector<int>> readers;
  std::unordered_map<std::string, int> slots;
  std::vector<int> group_of;  // node -> index into groups
  std::vector<Group> groups;

  Builder(InferencePlan& p, Model& m, const Graph& graph, const TracedOutputs& outs)
      : plan(p), model(m), nodes(graph.nodes()), group_of(graph.nodes().size(), -1) {
    for (Parameter* param : model.parameters()) tensors[param->name] = &param->value;
    for (const NamedBuffer& buffer : model.buffers()) tensors[buffer.name] = buffer.tensor;
    for (size_t i = 0; i < nodes.size(); ++i)
      for (const std::string& in : nodes[i].inputs) readers[in].push_back(int(i));
    for (const std::string* out : {&outs.logits, &outs.defects, &outs.pass, &outs.zones})
      if (!out->empty()) readers[*out].push_back(kModelOutput);
  }

  const Tensor& tensor(const GraphNode& node, const char* suffix) const {
    const std::string name = node.layer + "." + suffix;
    auto it = tensors.find(name);
    RT_CHECK(it != tensors.end(), "inference plan: the model has no tensor ", name);
    return *it->second;
  }

  // The node reading `value` when it is the only reader and has no group yet; -1 otherwise.
  int sole_free_reader(const std::string& value) const {
    auto it = readers.find(value);
    if (it == readers.end() || it->second.size() != 1) return -1;
    const int reader = it->second.front();
    return reader >= 0 && group_of[size_t(reader)] < 0 ? reader : -1;
  }

  void join(Group& group, int node) {
    group.nodes.push_back(node);
    group_of[size_t(node)] = int(groups.size());
  }

  // conv [-> batch norm] [-> add of a residual] [-> relu], each link the only reader of the last.
  Group conv_group(int conv) {
    Group g;
    join(g, g.conv = conv);
    int last = conv;
    if (int j = sole_free_reader(nodes[size_t(last)].output);
        j >= 0 && nodes[size_t(j)].op == GraphOp::kBatchNorm)
      join(g, g.bn = last = j);
    int j = sole_free_reader(nodes[size_t(last)].output);
    if (j >= 0 && nodes[size_t(j)].op == GraphOp::kAdd && plan.be_.fuses_conv_residual() &&
        nodes[size_t(j)].inputs[0] != nodes[size_t(j)].inputs[1]) {
      join(g, g.add = last = j);
      j = sole_free_reader(nodes[size_t(last)].output);
    }
    if (j >= 0 && nodes[size_t(j)].op == GraphOp::kRelu) join(g, g.relu = j);
    return g;
  }

  // A batch norm, an addition or a max pool of stride its window without padding
  // (Backend::make_max_pool_relu), with the ReLU that alone reads it.
  Group single_group(int node) {
    Group g;
    join(g, node);
    const GraphNode& n = nodes[size_t(node)];
    const bool tiled_max_pool = n.op == GraphOp::kMaxPool && n.stride == n.kernel && n.padding == 0;
    if (n.op == GraphOp::kBatchNorm || n.op == GraphOp::kAdd || tiled_max_pool)
      if (int j = sole_free_reader(n.output); j >= 0 && nodes[size_t(j)].op == GraphOp::kRelu)
        join(g, g.relu = j);
    return g;
  }

  void group_nodes() {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (group_of[i] >= 0) continue;
      // join() records the index the group will have once pushed.
      Group g = nodes[i].op == GraphOp::kConv ? conv_group(int(i)) : single_group(int(i));
      groups.push_back(std::move(g));
    }
  }

  int slot_of(const std::string& value) const {
    auto it = slots.find(value);
    RT_CHECK(it != slots.end(), "inference plan: value ", value, " is read before it is made");
    return it->second;
  }

  int new_slot(const std::string& value) {
    plan.values_.emplace_back();
    return slots[value] = int(plan.values_.size()) - 1;
  }

  // True when every reader of `value` other than node `reader` runs in a step before `group`'s.
  bool read_last_by(const std::string& value, int reader, const Group& group) const {
    for (int r : readers.at(value)) {
      if (r == reader) continue;
      if (r == kModelOutput || groups[size_t(group_of[size_t(r)])].anchor() >= group.anchor())
        return false;
    }
    return true;
  }

  std::vector<float> host(const Tensor& t) const {
    std::vector<float> values(size_t(t.numel()));
    plan.be_.download(t, values.data());
    return values;
  }

  // w' = w * s, b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps), per output channel.
  void fold(Step& step, const GraphNode& conv, const GraphNode& bn) {
    const Tensor& w = tensor(conv, "weight");
    std::vector<float> weight = host(w);
    const std::vector<float> gamma = host(tensor(bn, "weight")), beta = host(tensor(bn, "bias"));
    const std::vector<float> mean = host(tensor(bn, "running_mean"));
    const std::vector<float> var = host(tensor(bn, "running_var"));
    const size_t out = size_t(w.dim(0)), per_out = weight.size() / out;
    std::vector<float> bias = conv.bias ? host(tensor(conv, "bias")) : std::vector<float>(out, 0);
    RT_CHECK(gamma.size() == out, "inference plan: ", bn.layer, " has ", gamma.size(),
             " channels after ", conv.layer, "'s ", out);
    for (size_t o = 0; o < out; ++o) {
      const double scale = double(gamma[o]) / std::sqrt(double(var[o]) + double(bn.eps));
      for (size_t k = 0; k < per_out; ++k)
        weight[o * per_out + k] = float(double(weight[o * per_out + k]) * scale);
      bias[o] = float((double(bias[o]) - double(mean[o])) * scale + double(beta[o]));
    }
    step.folded_weight = plan.be_.alloc(w.shape());
    plan.be_.upload(weight.data(), step.folded_weight);
    step.folded_bias = plan.be_.alloc({int64_t(out)});
    plan.be_.upload(bias.data(), step.folded_bias);
    step.weight = &step.folded_weight;
    step.bias = &step.folded_bias;
  }

  void build_conv(Step& step, const Group& g) {
    const GraphNode& conv = nodes[size_t(g.conv)];
    const Tensor& w = tensor(conv, "weight");
    backend::ConvSpec spec;
    spec.out_channels = int(w.dim(0));
    spec.in_channels = int(w.dim(1));
    spec.kernel = conv.kernel;
    spec.stride = conv.stride;
    spec.padding = conv.padding;
    spec.fuse_relu = g.relu >= 0;
    spec.inference = true;
    spec.accumulate = g.add >= 0;
    if (g.bn >= 0) {
      fold(step, conv, nodes[size_t(g.bn)]);
      spec.bias = true;
    } else {
      step.weight = &w;
      step.bias = conv.bias ? &tensor(conv, "bias") : nullptr;
      spec.bias = conv.bias;
    }
    step.conv = plan.be_.make_conv(spec);
    plan.stats_.folded_batch_norms += g.bn >= 0;
    plan.stats_.fused_relus += g.relu >= 0;
    if (g.add < 0) return;
    // The addition's other input is the residual the sum post-op adds.
    const GraphNode& add = nodes[size_t(g.add)];
    const std::string& chain = nodes[size_t(g.bn >= 0 ? g.bn : g.conv)].output;
    const std::string& residual = add.inputs[0] == chain ? add.inputs[1] : add.inputs[0];
    step.residual = slot_of(residual);
    step.residual_in_place = step.residual != 0 && read_last_by(residual, g.add, g);
    plan.stats_.fused_residuals += 1;
  }

  void build_single(Step& step, const Group& g) {
    const GraphNode& node = nodes[size_t(g.nodes.front())];
    Backend& be = plan.be_;
    switch (node.op) {
      case GraphOp::kBatchNorm: {
        backend::BatchNormSpec spec;
        step.weight = &tensor(node, "weight");
        step.bias = &tensor(node, "bias");
        step.mean = &tensor(node, "running_mean");
        step.var = &tensor(node, "running_var");
        spec.channels = int(step.weight->numel());
        spec.eps = node.eps;
        spec.fuse_relu = g.relu >= 0;
        step.bn = be.make_batch_norm(spec);
        break;
      }
      case GraphOp::kAdd:
        step.add = be.make_add(g.relu >= 0);
        break;
      case GraphOp::kRelu:
        step.relu = be.make_relu();
        break;
      case GraphOp::kMaxPool:
      case GraphOp::kAvgPool:
      case GraphOp::kGlobalAvgPool: {
        backend::PoolSpec spec;
        spec.kind =
            node.op == GraphOp::kMaxPool ? backend::PoolKind::kMax : backend::PoolKind::kAvg;
        spec.global = node.op == GraphOp::kGlobalAvgPool;
        spec.kernel = node.kernel;
        spec.stride = node.stride;
        spec.padding = node.padding;
        step.pool = g.relu >= 0 ? be.make_max_pool_relu(node.kernel) : be.make_pool(spec);
        break;
      }
      case GraphOp::kLinear: {
        const Tensor& w = tensor(node, "weight");
        step.weight = &w;
        step.bias = node.bias ? &tensor(node, "bias") : nullptr;
        step.linear = be.make_linear({w.dim(1), int(w.dim(0)), node.bias});
        break;
      }
      case GraphOp::kFlatten:
        break;
      case GraphOp::kConv:
        RT_CHECK(false, "inference plan: a convolution outside a convolution group");
    }
    plan.stats_.fused_relus += g.relu >= 0;
  }

  void build(const std::string& input) {
    group_nodes();
    std::vector<size_t> order(groups.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return groups[a].anchor() < groups[b].anchor(); });
    new_slot(input);
    for (size_t gi : order) {
      const Group& g = groups[gi];
      auto step = std::make_unique<Step>();
      const GraphNode& first = nodes[size_t(g.nodes.front())];
      step->op = first.op;
      for (const std::string& in : first.inputs) step->inputs.push_back(slot_of(in));
      if (first.op == GraphOp::kConv)
        build_conv(*step, g);
      else
        build_single(*step, g);
      // Every value a group's nodes make before its anchor is read inside the group alone.
      step->output = new_slot(nodes[size_t(g.anchor())].output);
      plan.steps_.push_back(std::move(step));
    }
    plan.stats_.steps = int(plan.steps_.size());
  }
};

InferencePlan::InferencePlan(Model& model) : be_(model.backend()) {
  Graph graph;
  const std::string input = "input";
  const TracedOutputs outs = model.trace(graph, input);
  Builder builder(*this, model, graph, outs);
  builder.build(input);
  logits_ = builder.slot_of(outs.logits);
  if (model.inspect()) {
    heads_[int(Head::kDefects)] = builder.slot_of(outs.defects);
    heads_[int(Head::kPass)] = builder.slot_of(outs.pass);
    heads_[int(Head::kZones)] = builder.slot_of(outs.zones);
  }
}

InferencePlan::~InferencePlan() = default;

void InferencePlan::run(const Tensor& input) {
  values_[0] = input;
  for (auto& step : steps_) run_step(*step);
}

void InferencePlan::run_step(Step& s) {
  const Tensor& x = values_[size_t(s.inputs.front())];
  Tensor& y = values_[size_t(s.output)];
  switch (s.op) {
    case GraphOp::kConv:
      if (s.residual >= 0) {
        // The sum post-op adds what y holds: the residual itself, or a copy where it is read later.
        if (s.residual_in_place)
          y = values_[size_t(s.residual)];
        else
          be_.copy(values_[size_t(s.residual)], y);
      }
      s.conv->forward(x, *s.weight, s.bias, y);
      break;
    case GraphOp::kBatchNorm:
      s.bn->forward_inference(x, *s.weight, *s.bias, *s.mean, *s.var, y);
      break;
    case GraphOp::kRelu:
      s.relu->forward(x, y);
      break;
    case GraphOp::kMaxPool:
    case GraphOp::kAvgPool:
    case GraphOp::kGlobalAvgPool:
      s.pool->forward(x, y, false);
      break;
    case GraphOp::kFlatten:  // Linear reads a 4-D input in NCHW order: nothing moves
      y = x;
      break;
    case GraphOp::kLinear:
      s.linear->forward(x, *s.weight, s.bias, y);
      break;
    case GraphOp::kAdd:
      s.add->forward(x, values_[size_t(s.inputs[1])], y);
      break;
  }
}

const Tensor& InferencePlan::logits() const {
  return values_.at(size_t(logits_));
}

const Tensor& InferencePlan::head(Head which) const {
  const int slot = heads_[int(which)];
  RT_CHECK(slot >= 0, "inference plan: the model has no inspection heads");
  return values_.at(size_t(slot));
}

}  // namespace ringtrain::nn

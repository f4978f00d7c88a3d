// onnx_export.cpp — the traced graph (nn/graph.hpp) as ONNX nodes and initializers.
#include "onnx_export.hpp"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <set>

#include "ringtrain/build_config.hpp"
#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/graph.hpp"

namespace ringtrain::tools {
namespace {

constexpr int kOpset = 13;

class OnnxBuilder {
 public:
  OnnxBuilder(const nn::ModelFile& file, nn::Model& net)
      : file_(file), net_(net), graph_(*model_.mutable_graph()) {}

  onnx::ModelProto build() {
    model_.set_ir_version(onnx::IR_VERSION);
    model_.set_producer_name("ringtrain");
    model_.set_producer_version(RINGTRAIN_VERSION);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    const io::ModelCard& card = file_.card();
    graph_.set_name(card.model);
    add_value(*graph_.add_input(), "input", shape_of(card.input_shape));
    nn::Graph traced;
    const nn::TracedOutputs outputs = net_.trace(traced, "input");
    for (const nn::GraphNode& node : traced.nodes()) add(node);
    add_outputs(outputs);
    add_metadata();
    return std::move(model_);
  }

 private:
  onnx::NodeProto& node(const std::string& op, const std::string& name,
                        std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto& n = *graph_.add_node();
    n.set_op_type(op);
    n.set_name(name);
    for (const std::string& in : inputs) n.add_input(in);
    n.add_output(output);
    return n;
  }

  static void ints(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> values) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a.add_ints(v);
  }
  static void integer(onnx::NodeProto& n, const std::string& name, int64_t value) {
    auto& a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(value);
  }

  // The layer's tensor `<layer>.<suffix>` as an initializer (once), by its own name.
  std::string initializer(const std::string& layer, const std::string& suffix) {
    const std::string name = layer + "." + suffix;
    if (!initialized_.insert(name).second) return name;
    std::vector<int64_t> shape;
    const std::vector<float> values = nn::tensor_values(net_, name, &shape);
    onnx::TensorProto& t = *graph_.add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t.add_dims(d);
    t.set_raw_data(values.data(), values.size() * sizeof(float));  // little-endian, as x86
    return name;
  }

  void window(onnx::NodeProto& n, const nn::GraphNode& g) {
    ints(n, "kernel_shape", {g.kernel, g.kernel});
    ints(n, "strides", {g.stride, g.stride});
    ints(n, "pads", {g.padding, g.padding, g.padding, g.padding});
  }

  void add(const nn::GraphNode& g) {
    const std::string& x = g.inputs.at(0);
    switch (g.op) {
      case nn::GraphOp::kConv: {
        std::vector<std::string> in{x, initializer(g.layer, "weight")};
        if (g.bias) in.push_back(initializer(g.layer, "bias"));
        onnx::NodeProto& n = node("Conv", g.output, in, g.output);
        window(n, g);
        ints(n, "dilations", {1, 1});
        integer(n, "group", 1);
        break;
      }
      case nn::GraphOp::kBatchNorm: {
        onnx::NodeProto& n =
            node("BatchNormalization", g.output,
                 {x, initializer(g.layer, "weight"), initializer(g.layer, "bias"),
                  initializer(g.layer, "running_mean"), initializer(g.layer, "running_var")},
                 g.output);
        auto& eps = *n.add_attribute();
        eps.set_name("epsilon");
        eps.set_type(onnx::AttributeProto::FLOAT);
        eps.set_f(g.eps);
        break;
      }
      case nn::GraphOp::kRelu:
        node("Relu", g.output, {x}, g.output);
        break;
      case nn::GraphOp::kMaxPool:
        window(node("MaxPool", g.output, {x}, g.output), g);
        break;
      case nn::GraphOp::kAvgPool: {
        onnx::NodeProto& n = node("AveragePool", g.output, {x}, g.output);
        window(n, g);
        integer(n, "count_include_pad", 1);  // as our pools (PyTorch's default)
        break;
      }
      case nn::GraphOp::kGlobalAvgPool:
        node("GlobalAveragePool", g.output, {x}, g.output);
        break;
      case nn::GraphOp::kFlatten:
        integer(node("Flatten", g.output, {x}, g.output), "axis", 1);
        break;
      case nn::GraphOp::kLinear:
        linear(g, x);
        break;
      case nn::GraphOp::kAdd:
        node("Add", g.output, {x, g.inputs.at(1)}, g.output);
        break;
    }
  }

  // Gemm takes 2-D: the input is flattened first (a no-op when it already is).
  void linear(const nn::GraphNode& g, const std::string& x) {
    const std::string flat = g.output + "/flatten";
    integer(node("Flatten", flat, {x}, flat), "axis", 1);
    std::vector<std::string> in{flat, initializer(g.layer, "weight")};
    if (g.bias) in.push_back(initializer(g.layer, "bias"));
    integer(node("Gemm", g.output, in, g.output), "transB", 1);
  }

  static std::vector<int64_t> shape_of(const std::vector<int32_t>& dims) {
    return std::vector<int64_t>(dims.begin(), dims.end());
  }

  // The class logits and their softmax; with inspection heads the sigmoids of the others.
  void add_outputs(const nn::TracedOutputs& out) {
    const io::ModelCard& card = file_.card();
    const int64_t classes = int64_t(card.class_names.size());
    node("Identity", "logits", {out.logits}, "logits");
    integer(node("Softmax", "probabilities", {out.logits}, "probabilities"), "axis", 1);
    add_value(*graph_.add_output(), "logits", {classes});
    add_value(*graph_.add_output(), "probabilities", {classes});
    if (!card.inspect()) return;
    const std::pair<std::string, std::pair<std::string, int64_t>> heads[] = {
        {out.defects, {"defect_probabilities", int64_t(card.defect_names.size())}},
        {out.pass, {"pass_probability", 1}},
        {out.zones, {"zone_pass_probabilities", int64_t(card.zone_names.size())}}};
    for (const auto& [value, named] : heads) {
      node("Sigmoid", named.first, {value}, named.first);
      add_value(*graph_.add_output(), named.first, {named.second});
    }
  }

  // A float tensor value [batch, dims...], the batch left symbolic.
  static void add_value(onnx::ValueInfoProto& v, const std::string& name,
                        const std::vector<int64_t>& dims) {
    v.set_name(name);
    auto& t = *v.mutable_type()->mutable_tensor_type();
    t.set_elem_type(onnx::TensorProto::FLOAT);
    t.mutable_shape()->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) t.mutable_shape()->add_dim()->set_dim_value(d);
  }

  void meta(const std::string& key, const std::string& value) {
    auto& p = *model_.add_metadata_props();
    p.set_key(key);
    p.set_value(value);
  }

  template <typename T>
  static std::string json_list(const std::vector<T>& values) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) out += ", ";
      if constexpr (std::is_same_v<T, std::string>)
        out += "\"" + values[i] + "\"";
      else
        out += str(values[i]);
    }
    return out + "]";
  }

  void add_metadata() {
    const io::ModelCard& card = file_.card();
    meta("model", card.model);
    meta("heads", card.heads);
    meta("input_shape", json_list(card.input_shape));
    meta("mean", json_list(card.mean));
    meta("std", json_list(card.std));
    meta("normalization", "input = (pixel / 255 - mean) / std, per channel, NCHW");
    meta("class_names", json_list(card.class_names));
    if (card.inspect()) {
      meta("defect_names", json_list(card.defect_names));
      meta("zone_names", json_list(card.zone_names));
      meta("pass_threshold", str(card.pass_threshold));
      meta("verdict", "pass when pass_probability >= pass_threshold");
    }
    meta("source", file_.path());
    meta("global_step", str(file_.global_step()));
  }

  const nn::ModelFile& file_;
  nn::Model& net_;
  onnx::ModelProto model_;
  onnx::GraphProto& graph_;
  std::set<std::string> initialized_;
};

void write_atomically(const onnx::ModelProto& model, const std::string& path) {
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw Error(str(path, ": serialising the ONNX model failed"));
  write_file_atomically(path, bytes);
}

}  // namespace

int write_onnx(const nn::ModelFile& file, nn::Model& net, const std::string& onnx_path) {
  onnx::ModelProto model = OnnxBuilder(file, net).build();
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw Error(str(onnx_path, ": ONNX's checker refuses the model (nothing written): ", e.what()));
  }
  write_atomically(model, onnx_path);
  return model.graph().node_size();
}

}  // namespace ringtrain::tools

// model.cpp — Model: forward, loss, backward with gradient-ready callbacks, save and load.
#include "ringtrain/nn/model.hpp"

#include <map>
#include <unordered_map>

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

Model::Model(std::string name, Backend& be, const ModelInput& in, int classes,
             std::unique_ptr<Sequential> net, const HeadsSpec& heads)
    : name_(std::move(name)),
      be_(be),
      input_(in),
      classes_(classes),
      net_(std::move(net)),
      heads_(heads) {
  const Shape image{1, in.channels, in.height, in.width};
  if (heads_.kind == Heads::kInspect) {
    std::unique_ptr<Layer> classifier = net_->release_last();
    const int64_t features = backend::shape_numel(net_->output_shape(image));
    inspect_ = std::make_unique<InspectHeads>(be_, std::move(classifier), features, heads.defects);
  }
  net_->collect(params_, buffers_);
  if (inspect_) inspect_->collect(params_, buffers_);
  std::vector<Parameter*> order;
  if (inspect_) inspect_->collect_backward_order(order);  // backward runs the heads first
  net_->collect_backward_order(order);
  for (size_t i = 0; i < params_.size(); ++i) index_[params_[i]] = i;
  for (Parameter* p : order) backward_order_.push_back(index_.at(p));
  RT_CHECK(backward_order_.size() == params_.size(), "model ", name_,
           ": backward order misses parameters");
  // The input needs no gradient: the first layer skips its backward-data pass.
  net_->set_needs_input_grad(false);
  set_transient_memory(be_.recycles_memory());
  forward_flops_ = net_->forward_flops(image) + (inspect_ ? inspect_->forward_flops() : 0.0);
  // Backward computes the input and the weight gradients: two more forwards' worth.
  train_flops_ = 3.0 * forward_flops_;
  activation_bytes_ = net_->activation_floats(image) * int64_t(sizeof(float));
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const Parameter* p : params_) n += p->numel();
  return n;
}

const Tensor& Model::forward(const Tensor& input, bool training) {
  RT_CHECK(input.rank() == 4 && input.dim(1) == input_.channels && input.dim(2) == input_.height &&
               input.dim(3) == input_.width,
           "model ", name_, ": input ", shape_str(input.shape()), " is not [N,", input_.channels,
           ",", input_.height, ",", input_.width, "]");
  if (training && transient_memory_) release_consumed_grads();
  logits_ = &net_->forward(input, training);
  if (inspect_) logits_ = &inspect_->forward(*logits_, training);
  return *logits_;
}

LossResult Model::loss(const int32_t* labels, float grad_scale, float label_smoothing) {
  RT_CHECK(logits_ != nullptr, "model ", name_, ": loss() before forward()");
  LossResult result = be_.softmax_cross_entropy(*logits_, labels, dlogits_, label_smoothing);
  if (grad_scale != 1.0f) be_.scale(dlogits_, grad_scale);  // [N, classes]: a cheap pass
  return result;
}

backend::PendingLoss Model::loss_later(const int32_t* labels, float grad_scale,
                                       float label_smoothing) {
  RT_CHECK(logits_ != nullptr, "model ", name_, ": loss_later() before forward()");
  backend::PendingLoss pending =
      be_.softmax_cross_entropy_later(*logits_, labels, dlogits_, label_smoothing);
  if (grad_scale != 1.0f) be_.scale(dlogits_, grad_scale);  // queued after the loss kernel
  return pending;
}

InspectLosses Model::inspect_loss(const InspectTargets& targets, const InspectWeights& weights,
                                  float grad_scale) {
  RT_CHECK(inspect_ != nullptr, "model ", name_, ": inspect_loss() without inspection heads");
  return inspect_->loss(targets, weights, grad_scale);
}

void Model::backward(const std::function<void(size_t)>& on_grad_ready, bool accumulate) {
  RT_CHECK(!dlogits_.empty(), "model ", name_, ": backward() before loss()");
  for (Parameter* p : params_) {
    p->accumulating = accumulate;
    if (accumulate && p->grad_scratch.empty()) p->grad_scratch = be_.alloc(p->shape);
  }
  const GradReady ready = [&](Parameter& p) {
    // In fp32, in place: the sum over micro-batches is grad itself, before anyone reads it.
    if (accumulate) be_.axpby(1.0f, p.grad_scratch, 1.0f, p.grad);
    if (on_grad_ready) on_grad_ready(index_.at(&p));
  };
  net_->backward(inspect_ ? inspect_->backward(dlogits_, ready) : dlogits_, ready);
  if (transient_memory_) net_->release_input_grad();
}

namespace {

// Every convolution of net by its name.
std::map<std::string, Conv2d*> convolutions(Sequential& net) {
  std::map<std::string, Conv2d*> found;
  net.visit([&](Layer& layer) {
    if (auto* conv = dynamic_cast<Conv2d*>(&layer)) found[conv->name()] = conv;
  });
  return found;
}

}  // namespace

std::string Model::weight_grad_choices() {
  std::string out;
  for (const auto& [name, conv] : convolutions(*net_)) {
    const std::string choice = conv->op().weight_grad_choice();
    if (!choice.empty()) out += (out.empty() ? "" : ",") + name + "=" + choice;
  }
  return out;
}

std::vector<std::pair<std::string, backend::ConvOp::WeightGradTimes>> Model::weight_grad_times() {
  std::vector<std::pair<std::string, backend::ConvOp::WeightGradTimes>> out;
  for (const auto& [name, conv] : convolutions(*net_)) {
    const backend::ConvOp::WeightGradTimes t = conv->op().weight_grad_times();
    if (t.onednn_ms > 0 || t.gemm_ms > 0 || t.data_onednn_ms > 0 || t.data_forward_ms > 0)
      out.emplace_back(name, t);
  }
  return out;
}

void Model::preset_weight_grad_choices(const std::string& choices, const std::string& source) {
  const std::map<std::string, Conv2d*> convs = convolutions(*net_);
  size_t start = 0;
  while (start < choices.size()) {
    size_t end = choices.find(',', start);
    if (end == std::string::npos) end = choices.size();
    const std::string item = choices.substr(start, end - start);
    const size_t eq = item.find('=');
    RT_REQUIRE_INPUT(eq != std::string::npos, source, ": weight-gradient choice '", item,
                     "' is not name=path");
    const auto it = convs.find(item.substr(0, eq));
    RT_REQUIRE_INPUT(it != convs.end(), source, ": weight-gradient choice for ", item.substr(0, eq),
                     ", which model ", name_, " has no convolution of");
    it->second->op().preset_weight_grad(item.substr(eq + 1));
    start = end + 1;
  }
}

void Model::set_transient_memory(bool on) {
  transient_memory_ = on;
  net_->set_transient_memory(on);
}

void Model::release_consumed_grads() {
  for (Parameter* p : params_)
    if (p->grad_consumed && !p->grad.is_view()) p->grad = Tensor();
}

void Model::zero_grad() {
  for (Parameter* p : params_) {
    if (p->grad.empty()) p->grad = be_.alloc(p->shape);
    be_.fill(p->grad, 0.0f);
  }
}

namespace {

void save_tensor(Backend& be, h5::Group& group, const std::string& name, const Tensor& t) {
  std::vector<float> host(size_t(t.numel()));
  be.download(t, host.data());
  h5::Dims dims(t.shape().begin(), t.shape().end());
  group.write<float>(name, dims, host.data());
}

void load_tensor(Backend& be, const h5::Group& group, const std::string& model,
                 const std::string& name, Tensor& t) {
  RT_REQUIRE_INPUT(group.exists(name), "file ", group.file_name(), ": ", group.path(),
                   " has no tensor ", name, " for model ", model);
  h5::Dataset ds = group.open_dataset(name);
  h5::Dims dims = ds.dims();
  Shape file_shape(dims.begin(), dims.end());
  RT_REQUIRE_INPUT(file_shape == t.shape(), "file ", group.file_name(), ": tensor ", name,
                   " has shape ", shape_str(file_shape), " but model ", model, " needs ",
                   shape_str(t.shape()));
  RT_REQUIRE_INPUT(ds.holds<float>(), "file ", group.file_name(), ": tensor ", name,
                   " is not float32");
  std::vector<float> host = ds.read_all<float>();
  be.upload(host.data(), t);
}

}  // namespace

void Model::save(h5::Group& group) {
  group.set_attr("model", name_);
  group.set_attr("classes", int32_t(classes_));
  group.set_attr("input_chw", std::vector<int32_t>{input_.channels, input_.height, input_.width});
  group.set_attr("heads", heads_name(heads_.kind));
  for (const Parameter* p : params_) save_tensor(be_, group, p->name, p->value);
  for (const NamedBuffer& b : buffers_) save_tensor(be_, group, b.name, *b.tensor);
}

void Model::load(const h5::Group& group) {
  for (Parameter* p : params_) load_tensor(be_, group, name_, p->name, p->value);
  for (const NamedBuffer& b : buffers_) load_tensor(be_, group, name_, b.name, *b.tensor);
}

std::vector<float> Model::buffer_values() {
  std::vector<float> values;
  for (const NamedBuffer& b : buffers_) {
    size_t at = values.size();
    values.resize(at + size_t(b.tensor->numel()));
    be_.download(*b.tensor, values.data() + at);
  }
  return values;
}

void Model::set_buffer_values(const std::vector<float>& values) {
  size_t at = 0;
  for (const NamedBuffer& b : buffers_) {
    RT_CHECK(at + size_t(b.tensor->numel()) <= values.size(), "model ", name_, ": ", values.size(),
             " buffer values for more buffers");
    be_.upload(values.data() + at, *b.tensor);
    at += size_t(b.tensor->numel());
  }
  RT_CHECK(at == values.size(), "model ", name_, ": ", values.size(), " buffer values for ", at);
}

}  // namespace ringtrain::nn

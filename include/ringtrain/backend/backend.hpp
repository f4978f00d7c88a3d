// backend.hpp — the compute interface every device implements: tensors and the ops layers need.
//
// Layers never see oneDNN, cuDNN or CUDA. They ask a Backend for op objects (one per layer,
// like cuDNN descriptors) and call them on device-resident Tensors. An op object caches
// what it builds per input shape (oneDNN primitives, cuDNN algorithms), so a layer that
// meets a new batch size (the last partial batch, evaluation) builds once more and then
// reuses both. Ops allocate their outputs: `Tensor& y` is (re)allocated only when its
// shape or layout changes, so steady-state steps allocate nothing. Activations may come
// out in a backend-chosen layout; a layout-aware op reads any layout it is handed.
// Parameters, gradients and optimizer state are plain fp32: gradients may be views into
// a fusion buffer (Tensor::view), and backward writes straight into them.
//
// All ops are asynchronous with respect to the host on devices that have streams;
// download() and synchronize() wait. The CPU backends run synchronously.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/backend/memory_ledger.hpp"
#include "ringtrain/backend/tensor.hpp"
#include "ringtrain/core/digest.hpp"

namespace ringtrain::backend {

// Bytes of tensor memory in use and the most in use at once (Backend::memory_use).
struct MemoryUse {
  size_t in_use = 0;  // bytes the tensors asked for (cuda: as torch.cuda.memory_allocated)
  size_t peak = 0;
  bool device = false;
  size_t block_peak = 0;      // cuda: the pool's blocks, size classes and best fit included
  size_t workspace_peak = 0;  // cuda: the largest cuDNN workspace one call took
  // How `peak` was split by what took the memory (memory_ledger.hpp), the first moment it was
  // reached: the op kinds only where a profiled backend ran the ops, else all outside_ops.
  MemoryByTag at_peak;
};

// What activations are stored in and convolutions multiply: fp32; bf16 or fp16 with fp32
// accumulation; or tf32 (fp32 tensors, tensor-core products that round their inputs to
// 10-bit mantissas). Parameters, gradients, optimizer state and the loss stay fp32 in every
// one. cpu and ref take fp32 and bf16; cuda takes all four.
enum class Precision { kF32, kBF16, kF16, kTF32 };
// "fp32", "bf16", "fp16" or "tf32"; anything else throws InputError naming the value.
Precision parse_precision(const std::string& text);
const char* precision_name(Precision precision);

// How the cpu backend computes a convolution's weight gradient (the deck's
// train.conv_weight_grad): oneDNN's backward-weights kernel; one matmul of the output gradient
// against the unfolded input (im2col, then oneDNN's matmul); or, per convolution, whichever of
// the two its first backward pass measured faster on the real shapes. The other backends
// take the setting and ignore it.
enum class ConvWeightGrad { kOnednn, kGemm, kMeasure };
// "onednn", "gemm" or "measure"; anything else throws InputError naming the value.
ConvWeightGrad parse_conv_weight_grad(const std::string& text);
const char* conv_weight_grad_name(ConvWeightGrad path);

// The algorithm of the cpu backend's 3x3 stride-1 fp32 convolutions (the deck's
// train.conv_algorithm): oneDNN's direct kernels; its Winograd ones (F(4x4, 3x3): 2.25 times
// fewer multiplications, a little more rounding) for the forward, backward-data and
// backward-weights passes where oneDNN has them; or, per convolution, whichever of the two
// ran its first forward pass faster (Winograd loses on narrow layers and on few tiles); or,
// per convolution and batch shape, Winograd where its channels and the batch's 4x4 output
// tiles are enough for it to pay by a fixed rule (auto: the same choice in every run). Every other
// convolution is direct. The other backends take the setting and ignore it.
enum class ConvAlgorithm { kDirect, kWinograd, kMeasure, kAuto };
// "direct", "winograd", "measure" or "auto"; anything else throws InputError naming the value.
ConvAlgorithm parse_conv_algorithm(const std::string& text);
const char* conv_algorithm_name(ConvAlgorithm algorithm);

// Sums n per-channel floats (host memory) across ranks in place; set for synchronized BN.
using StatReducer = std::function<void(float* values, size_t n)>;

struct ConvSpec {
  int in_channels = 0;
  int out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  bool bias = true;
  bool fuse_relu = false;  // y = relu(conv(x)); backward_* then expect dy of the conv output
  // Inference only (forward, no backward): the weights handed to forward are the same, unchanged
  // tensor every call, so a backend may keep them prepared (reordered) after the first.
  bool inference = false;
  // With inference: forward adds into y, y = conv(x) + bias + y (then the ReLU), where y holds a
  // residual on entry, in any layout: a residual connection fused into the convolution. Only
  // on a backend whose fuses_conv_residual() is true.
  bool accumulate = false;
};

struct LinearSpec {
  int64_t in_features = 0;  // C*H*W of a 4-D input: Linear flattens in NCHW order
  int out_features = 0;
  bool bias = true;
};

struct BatchNormSpec {
  int channels = 0;
  float eps = 1e-5f;
  bool fuse_relu = false;  // y = relu(bn(x)); backward takes dy of the ReLU's output
};

enum class PoolKind { kMax, kAvg };

struct PoolSpec {
  PoolKind kind = PoolKind::kMax;
  int kernel = 2;
  int stride = 2;
  int padding = 0;      // average pooling counts the padding (PyTorch's count_include_pad)
  bool global = false;  // kernel = the whole H x W, output N x C x 1 x 1
};

struct SgdSpec {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

// One tensor of a multi-tensor SGD step (Backend::sgd_update_many): its weights, gradient and
// momentum buffer (plain fp32, equal numel) and its own weight decay.
struct SgdTensors {
  Tensor* w;
  const Tensor* g;
  Tensor* momentum_buf;
  float weight_decay;
};

// The update rules beside SGD; nn/optimizer.hpp gives each one's formula and source.
enum class UpdateRule { kLars, kLamb, kAdamW };

struct AdaptiveSpec {
  UpdateRule rule = UpdateRule::kAdamW;
  float lr = 1e-3f;
  float weight_decay = 0.0f;
  float momentum = 0.9f;                            // LARS
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // LAMB, AdamW
  float trust_coef = 1e-3f;                         // LARS: eta
  bool layer_adaptation = true;  // LARS, LAMB: the tensor's trust ratio (off: ratio 1)
  int64_t step = 1;              // this update's number from 1: Adam's bias correction
};

struct LossResult {
  double loss = 0;      // mean over the batch
  int64_t correct = 0;  // argmax == label
  int64_t count = 0;    // batch size
};

// A loss whose numbers may still be on their way from the device. get() waits for them
// the first time and returns the same numbers after; the host backends hand one that is
// known already.
class PendingLoss {
 public:
  PendingLoss() = default;
  explicit PendingLoss(LossResult known) : value_(known), known_(true) {}
  explicit PendingLoss(std::function<LossResult()> read) : read_(std::move(read)) {}
  LossResult get() {
    if (!known_) {
      value_ = read_();
      known_ = true;
      read_ = nullptr;
    }
    return value_;
  }

 private:
  std::function<LossResult()> read_;
  LossResult value_;
  bool known_ = false;
};

// What every op may keep from one call to the next: its forward's converted inputs and weights,
// masks, cuDNN's reserve space, conversion scratch. release_saved() gives it back once a
// training step's backward has run (Layer::set_transient_memory: memory that a caching device
// pool takes again cheaply); the next call makes it again. A backward after release_saved
// without a forward in between is not allowed.
class SavedStateOp {
 public:
  virtual ~SavedStateOp() = default;
  virtual void release_saved() {}
};

class ConvOp : public SavedStateOp {
 public:
  // y = conv(x, w) + bias (then ReLU if spec.fuse_relu). w is plain [out, in, k, k].
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  // w is the last forward's, unchanged since: a backend may read the copy that forward made.
  virtual void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  // dw (plain, possibly a view) and dbias are overwritten, not accumulated.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) = 0;
  // What this convolution chose by timing: with ConvWeightGrad::kMeasure "gemm" or "onednn" for
  // the weight gradient, then "+forward" where the input gradient runs on the forward kernel;
  // with ConvAlgorithm::kMeasure then "winograd" or "direct" ('+'-joined after the paths); ""
  // until every choice timed here is made, and where none is. preset_weight_grad makes the
  // choices without timing, or replaces those made (rank 0's, a checkpoint's), so that ranks and
  // resumed runs compute alike; "", ops without the choice, and tokens of a choice the op does
  // not time are ignored.
  virtual std::string weight_grad_choice() const { return ""; }
  virtual void preset_weight_grad(const std::string& choice) { (void)choice; }
  // What measure timed for the choice (medians, ms); zeros where nothing was timed (another
  // path by the key, a preset, not yet decided).
  struct WeightGradTimes {
    double onednn_ms = 0, gemm_ms = 0;
    double data_onednn_ms = 0, data_forward_ms = 0;  // the input gradient's two paths
  };
  virtual WeightGradTimes weight_grad_times() const { return {}; }
};

class LinearOp : public SavedStateOp {
 public:
  // x is [N, F] or [N, C, H, W] with C*H*W = F; w is plain [out, F]; y is [N, out].
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias) = 0;
};

class BatchNormOp : public SavedStateOp {
 public:
  // Normalises with the batch's statistics and returns them in mean and var (biased),
  // plain [C]. With a reducer the statistics are over every rank's batch. Returns the
  // number of values per channel they cover (N*H*W, summed over ranks with a reducer).
  virtual double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  Tensor& y, Tensor& mean, Tensor& var,
                                  const StatReducer* reducer) = 0;
  virtual void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& mean, const Tensor& var, Tensor& y) = 0;
  // relu(bn(x) + residual), a residual block's second batch norm with its sum and ReLU, in one
  // pass where the backend can (an op made without fuse_relu, in training): the statistics as
  // forward_training's, returned in mean and var, and their count returned. Returns 0 where it
  // cannot, y untouched: the caller then runs forward_training and an AddOp. backward is
  // unchanged: it takes the gradient of bn(x), the sum's gradient masked by the ReLU.
  virtual double forward_training_add_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& residual, Tensor& y, Tensor& mean,
                                           Tensor& var, const StatReducer* reducer) {
    (void)x, (void)gamma, (void)beta, (void)residual, (void)y, (void)mean, (void)var;
    (void)reducer;
    return 0;
  }
  // mean and var are those forward_training returned. dgamma and dbeta are this rank's
  // own; with a reducer dx accounts for every rank's batch (synchronized BN).
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        const StatReducer* reducer) = 0;
};

// Batch norm, its ReLU and a max pool over non-overlapping window x window tiles (stride =
// window, no padding; rows and columns past the last whole tile are dropped, as pooling
// drops them) in one op: y = maxpool(relu(bn(x))), a stem's three layers. A backend may fuse
// them so that the full-size normalised tensor is never written; Backend's default runs the
// BatchNormOp and PoolOp it makes.
struct NormReluMaxPoolSpec {
  int channels = 0;
  float eps = 1e-5f;
  int window = 2;
};

class NormReluMaxPoolOp : public SavedStateOp {
 public:
  // As BatchNormOp::forward_training, with y the pooled output.
  virtual double forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  Tensor& y, Tensor& mean, Tensor& var,
                                  const StatReducer* reducer) = 0;
  // dy is the pooled output's gradient, for the x of the last forward_training; otherwise as
  // BatchNormOp::backward. Each tile's gradient goes to the first of its largest values, and
  // to none where relu cut them all to 0.
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        const StatReducer* reducer) = 0;
};

class ReluOp : public SavedStateOp {
 public:
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // y is forward's output: dx = dy where y > 0, else 0.
  virtual void backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  // The same for a dy that arrives in two parts (a residual block's two paths): dx = dy_a +
  // dy_b where y > 0, else 0, in one pass. Bitwise what an AddOp (without ReLU) and backward
  // give: the sum is rounded to the stored type before the mask, as the AddOp stores it.
  virtual void backward_of_sum(const Tensor& y, const Tensor& dy_a, const Tensor& dy_b,
                               Tensor& dx) = 0;
};

class PoolOp : public SavedStateOp {
 public:
  virtual void forward(const Tensor& x, Tensor& y, bool training) = 0;
  // Uses what the last training forward kept (max positions), for the same x shape.
  virtual void backward(const Tensor& dy, Tensor& dx) = 0;
};

// out = a + b (then ReLU if fuse_relu); a residual connection.
class AddOp : public SavedStateOp {
 public:
  virtual void forward(const Tensor& a, const Tensor& b, Tensor& out) = 0;
};

// Work recorded once on a device (Backend::capture) and queued again as a whole.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Queues the recorded work again on the backend's stream, on the same tensors (their values
  // as they are when it runs); returns before it ends, like the ops it recorded.
  virtual void replay() = 0;
  // The kernels, copies and other device operations recorded.
  virtual size_t operations() const = 0;
};

// Time a backend spent inside its ops moving tensors between layouts (cpu: oneDNN's reorders
// into and out of its blocked layouts), summed since it was made.
struct ReorderTime {
  double seconds = 0;
  int64_t calls = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;
  virtual Precision precision() const { return Precision::kF32; }
  // The instruction set the library kernels run on ("avx512_core_amx", "avx512_core_bf16",
  // ...), for the start line and the results file; "" where it means nothing (ref).
  virtual std::string instruction_set() const { return ""; }
  // The device and the versions of the libraries behind the kernels, as loaded at run time
  // ("oneDNN 2.6.3"; the GPU, driver, cuDNN, cuBLAS and NCCL on cuda), for the start line and
  // the results file; "" where there are none (ref).
  virtual std::string libraries() const { return ""; }
  // What the backend chose per op where it had a choice, so far ("conv weight gradients:
  // gemm 7, oneDNN 13 (measured)" on cpu, "batch norm + ReLU: fused 9, separate 0; conv +
  // bias + ReLU: fused 2, separate 0" on cuda); "" where it had none.
  virtual std::string op_choices() const { return ""; }
  // Tensor memory in use now and the most at once since the backend was made or the last
  // reset_memory_peak(). cuda: what the memory pool handed out, cuDNN's workspace included
  // (device = true); host backends: every tensor in host memory of the process (oneDNN's own
  // scratch is not counted).
  virtual MemoryUse memory_use() const { return {}; }
  // The reorders inside ops so far, for the per-op profile to book apart from the ops that
  // ran them; zero where there are none (ref) or they are not timed (cuda's conversions).
  virtual ReorderTime reorder_time() const { return {}; }
  virtual void reset_memory_peak() {}
  // Whether memory given back is taken again cheaply (cuda's caching pool): training then drops
  // each activation gradient once it is used (Layer::set_transient_memory). Host backends keep
  // them: a fresh host allocation of an activation costs a page fault per 4 KiB on first touch.
  virtual bool recycles_memory() const { return false; }

  // Whether make_conv takes ConvSpec::accumulate (a residual addition fused into the
  // convolution); where it does not, the caller adds with make_add.
  virtual bool fuses_conv_residual() const { return false; }

  // Plain memory on the device, uninitialised.
  virtual Tensor alloc(const Shape& shape, DType dtype = DType::kF32) = 0;
  // Host fp32 (numel values, plain order) to a plain device tensor of that shape.
  virtual void upload(const float* host, Tensor& t) = 0;
  // Any layout to host fp32 in plain order; waits for the device.
  virtual void download(const Tensor& t, float* host) = 0;
  virtual void synchronize() = 0;

  virtual std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec) = 0;
  virtual std::unique_ptr<LinearOp> make_linear(const LinearSpec& spec) = 0;
  virtual std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& spec) = 0;
  virtual std::unique_ptr<ReluOp> make_relu() = 0;
  virtual std::unique_ptr<PoolOp> make_pool(const PoolSpec& spec) = 0;
  virtual std::unique_ptr<AddOp> make_add(bool fuse_relu) = 0;
  // This default runs make_batch_norm's op (with its ReLU), then make_pool's max pool.
  virtual std::unique_ptr<NormReluMaxPoolOp> make_norm_relu_max_pool(
      const NormReluMaxPoolSpec& spec);
  // y = relu(max pool of x over window x window tiles of stride window, no padding; rows and
  // columns past the last whole tile dropped): a pool and the ReLU after it as one PoolOp, so
  // that a backend may fuse them. Backward sends each tile's gradient to the first of its
  // largest values, and to none where that value is not above 0. This default runs make_pool's
  // max pool, then make_relu's op.
  virtual std::unique_ptr<PoolOp> make_max_pool_relu(int window);

  // Softmax cross-entropy of plain [N, classes] logits against host labels, with the targets
  // smoothed to t = (1 - smoothing) onehot + smoothing / classes (0: plain one-hot): the loss
  // is the mean of -sum t log softmax, dlogits = (softmax - t) / N. A label outside
  // [0, classes) is an Error.
  virtual LossResult softmax_cross_entropy(const Tensor& logits, const int32_t* labels,
                                           Tensor& dlogits, float smoothing) = 0;
  // The same, without waiting for the loss: dlogits is queued as above and the labels may
  // change once this returns, but the numbers are read when get() is called (a device with
  // streams need not stop between forward and backward for them). The default computes
  // them now: the host backends give exactly softmax_cross_entropy's result.
  virtual PendingLoss softmax_cross_entropy_later(const Tensor& logits, const int32_t* labels,
                                                  Tensor& dlogits, float smoothing) {
    return PendingLoss(softmax_cross_entropy(logits, labels, dlogits, smoothing));
  }

  // Sigmoid binary cross-entropy of plain [N, K] logits against host targets (N*K values in
  // [0, 1]): the mean over all N*K values of -t log s(z) - (1-t) log(1-s(z)), computed stably
  // from z, is returned (fp64 sums; waits for the device); dlogits = grad_weight *
  // (s(z) - t) / (N*K) (a multi-label head's loss weight and loss scale go in grad_weight).
  virtual double sigmoid_binary_cross_entropy(const Tensor& logits, const float* targets,
                                              float grad_weight, Tensor& dlogits) = 0;

  // Plain fp32 tensors of equal numel:
  // w -= lr * (nesterov ? g' + m*buf : buf), buf = m*buf + g', g' = g + wd*w.
  virtual void sgd_update(Tensor& w, const Tensor& g, Tensor& momentum_buf,
                          const SgdSpec& spec) = 0;
  // sgd_update on each of `tensors` in order, with spec's lr, momentum and nesterov and each
  // tensor's own weight decay (spec.weight_decay is not read): the same bits as those calls.
  // cuda updates them all in one launch (a model's 62 tensors were 62 launches); this default
  // makes the calls.
  virtual void sgd_update_many(const std::vector<SgdTensors>& tensors, const SgdSpec& spec) {
    for (const SgdTensors& t : tensors) {
      SgdSpec own = spec;
      own.weight_decay = t.weight_decay;
      sgd_update(*t.w, *t.g, *t.momentum_buf, own);
    }
  }
  // One update by an adaptive rule, plain fp32 tensors of equal numel: m is the first moment
  // (LARS: the momentum buffer), v the second (LAMB, AdamW; null for LARS). The norms of a
  // trust ratio are summed in fp64 in a fixed order: the same bits on every rank and run.
  virtual void adaptive_update(Tensor& w, const Tensor& g, Tensor& m, Tensor* v,
                               const AdaptiveSpec& spec) = 0;
  // The sum of the squares of every value of plain fp32 tensors, in fp64 and a fixed order
  // whatever the thread count (the global gradient norm that clipping needs); waits for the
  // device.
  virtual double sum_of_squares(const std::vector<const Tensor*>& tensors) = 0;
  virtual void fill(Tensor& t, float value) = 0;
  // dst = src, converting layout; dst is (re)allocated plain if its shape differs.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void scale(Tensor& t, float factor) = 0;
  // True when no value of t is NaN or infinite. This default downloads t; backends with
  // host memory check in place.
  virtual bool all_finite(const Tensor& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    download(t, host.data());
    for (float v : host)
      if (!std::isfinite(v)) return false;
    return true;
  }
  // The index of the first of `tensors` holding a NaN or inf, or tensors.size() when every
  // value of every one is finite: all_finite over many tensors with one answer, for a caller
  // that checks every gradient each step. This default asks all_finite of each in turn (the
  // host backends, unchanged); cuda checks them all on its stream and waits once.
  virtual size_t first_nonfinite(const std::vector<const Tensor*>& tensors) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!all_finite(*tensors[i])) return i;
    return tensors.size();
  }
  // The weight digest (core/digest.hpp) of each of `tensors`' fp32 values, in order, for the
  // ranks' weight check. This default downloads each tensor; the host backends read theirs in
  // place; cuda sums on the device and copies back only the sums.
  virtual std::vector<uint64_t> digests(const std::vector<const Tensor*>& tensors) {
    std::vector<uint64_t> out;
    std::vector<float> host;
    for (const Tensor* t : tensors) {
      host.resize(static_cast<size_t>(t->numel()));
      download(*t, host.data());
      out.push_back(digest_f32(host.data(), host.size()));
    }
    return out;
  }
  // y = a*x + b*y (plain, equal numel).
  virtual void axpby(float a, const Tensor& x, float b, Tensor& y) = 0;
  // y = a*x + b*y and v = c*u + d*v (plain, each pair of equal numel) in one op: the same bits
  // as the two axpby calls (a batch norm's running mean and variance in one launch on cuda).
  virtual void axpby_pair(float a, const Tensor& x, float b, Tensor& y, float c, const Tensor& u,
                          float d, Tensor& v) {
    axpby(a, x, b, y);
    axpby(c, u, d, v);
  }

  // Records what `work` queues on this backend's device without running it, for replay() to
  // queue again in one call (on cuda one CUDA graph: a training step's hundreds of launches
  // for one). Null where the backend runs each op as it is called (ref, cpu). The work must
  // not wait for the device nor read results on the host (an op that does, or that CUDA will
  // not record, throws, naming it, and nothing is recorded); host values it passes by value
  // (a learning rate, labels copied up) are replayed as they were recorded. The tensors it
  // reads and writes must outlive the CapturedWork; memory it took and gave back is kept for
  // its replays until the CapturedWork goes, and so is the backend's own scratch taken before
  // that eager ops give back meanwhile. A loss the work computed cannot be read (its get()
  // throws): time the replays, and run a step whose loss is wanted eagerly.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) {
    (void)work;
    return nullptr;
  }

  // Ready marks, for another thread that reads memory this backend's ops write (the fusion
  // engine's comm thread reducing gradients): record_ready(slot) marks all work issued so
  // far; wait_ready(slot), on any thread, blocks until that work has finished. Slots are
  // small integers (bucket indices); record a slot again only after its wait returned.
  // The CPU backends finish every op before it returns: both do nothing there.
  virtual void record_ready(size_t slot) = 0;
  virtual void wait_ready(size_t slot) = 0;
  // The device event behind record_ready(slot) (an opaque cudaEvent_t), for a consumer that
  // orders its own stream after it instead of waiting on the host
  // (Allreducer::wait_on_device); null on the CPU backends.
  virtual const void* ready_mark(size_t slot) {
    (void)slot;
    return nullptr;
  }
};

// "cpu" (oneDNN), "ref" (plain loops, for tests) or "cuda" (when built). The CPU backends
// set the OpenMP thread count (omp_set_num_threads: it applies to the calling thread, so
// create the backend on the thread that runs the model); nothing is printed.
// bf16: cpu needs a CPU with AVX512-BF16 or AMX (InputError naming the ISA oneDNN found
// otherwise: emulated bf16 would train slower than fp32); ref rounds every stored activation
// to bf16 (round to nearest even) around its fp32 loops, the reference the cpu path is
// checked against. fp16 and tf32 are cuda's alone: cpu and ref refuse them (InputError
// naming the key, the value and the backend that takes it). "cuda" here is
// make_cuda_backend with default options but for the precision.
// weight_grad: cpu's path for convolution weight gradients (ConvWeightGrad); conv_algorithm:
// cpu's algorithm for 3x3 stride-1 fp32 convolutions (ConvAlgorithm).
std::unique_ptr<Backend> make_backend(const std::string& name, int threads,
                                      Precision precision = Precision::kF32,
                                      ConvWeightGrad weight_grad = ConvWeightGrad::kOnednn,
                                      ConvAlgorithm conv_algorithm = ConvAlgorithm::kDirect);

}  // namespace ringtrain::backend

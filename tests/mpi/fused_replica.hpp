// fused_replica.hpp — one rank's small model trained through the trainer's DataParallel (its
// gradients bound into the fusion engine's buckets, several of them), for the MPI tests that
// step replicas on every rank and compare their weights.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model_weights.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/comm/allreduce/allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/train/data_parallel.hpp"

namespace rt_test {

struct FusedReplicaSpec {
  std::string model;
  uint64_t seed = 0;
  int side = 16;  // 1 x side x side images
  int classes = 5;
  ringtrain::nn::OptimizerOptions sgd;
  ringtrain::comm::allreduce::Algorithm algorithm = ringtrain::comm::allreduce::Algorithm::ring;
  double stall_timeout_s = ringtrain::comm::fusion::FusionOptions{}.stall_timeout_s;
};

struct FusedReplica {
  std::unique_ptr<ringtrain::backend::Backend> be = ringtrain::backend::make_backend("cpu", 1);
  std::unique_ptr<ringtrain::nn::Model> model;
  std::unique_ptr<ringtrain::nn::Optimizer> sgd;
  std::unique_ptr<ringtrain::comm::allreduce::Allreducer> reducer, stats;
  std::unique_ptr<ringtrain::train::DataParallel> parallel;
  ringtrain::backend::Tensor input;
  int side;

  FusedReplica(const ringtrain::comm::Communicator& comm, const FusedReplicaSpec& spec)
      : side(spec.side) {
    using namespace ringtrain;
    model = nn::make_model(spec.model, {1, spec.side, spec.side}, spec.classes, *be, spec.seed);
    sgd = std::make_unique<nn::Optimizer>(model->parameters(), spec.sgd, *be);
    reducer = comm::allreduce::make_allreducer(comm, spec.algorithm, {});
    stats = comm::allreduce::make_allreducer(comm, comm::allreduce::Algorithm::mpi, {});
    comm::fusion::FusionOptions fusion;
    fusion.fusion_mib = 0.05;  // several buckets
    fusion.first_bucket_mib = 0.01;
    fusion.stall_timeout_s = spec.stall_timeout_s;
    parallel = std::make_unique<train::DataParallel>(comm, *model, *be, *reducer, *stats, fusion);
  }

  // Forward, loss (its gradient x grad_scale), backward and the allreduce of one batch of
  // labels.size() images; the optimizer step is the caller's.
  void reduce(const std::vector<float>& images, const std::vector<int32_t>& labels,
              float grad_scale = 1.0f) {
    const ringtrain::backend::Shape shape{int64_t(labels.size()), 1, side, side};
    if (input.empty() || input.shape() != shape) input = be->alloc(shape);
    be->upload(images.data(), input);
    model->forward(input, true);
    model->loss(labels.data(), grad_scale);
    parallel->backward();
    parallel->synchronize();
  }

  std::vector<float> weights() const { return model_weights(*model, *be); }
};

}  // namespace rt_test

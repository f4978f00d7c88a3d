// gpu_binding.cpp — gathering every rank's visible GPUs, grouped by node.
#include "ringtrain/train/gpu_binding.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/trainer.hpp"

namespace ringtrain::train {
namespace {

// A rank's record: node index, local rank, then its bus ids, separated by the ASCII unit
// separator; records are joined by the record separator. Neither occurs in a bus id.
constexpr char kField = '\x1f', kRecord = '\x1e';

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  return parts;
}

std::string my_record(const comm::Communicator& comm) {
  std::string record =
      std::to_string(comm.node_index()) + kField + std::to_string(comm.local_rank());
  for (const std::string& id : backend::cuda_visible_bus_ids()) record += kField + id;
  return record;
}

}  // namespace

backend::NodeGpus gather_node_gpus(const comm::Communicator& comm) {
  std::vector<std::string> records = comm.gather_strings_to_root(my_record(comm));
  std::string joined;
  for (const std::string& record : records) joined += record + kRecord;
  std::vector<uint8_t> bytes(joined.begin(), joined.end());
  comm.broadcast(bytes, 0);
  records = split(std::string(bytes.begin(), bytes.end()), kRecord);
  RT_CHECK(int(records.size()) == comm.size(), "gather_node_gpus: ", records.size(),
           " records from ", comm.size(), " ranks");

  backend::NodeGpus node;
  node.host = comm.hostname();
  node.ranks.assign(size_t(comm.local_size()), -1);
  node.visible.assign(size_t(comm.local_size()), {});
  for (int rank = 0; rank < comm.size(); ++rank) {
    std::vector<std::string> fields = split(records[size_t(rank)], kField);
    RT_CHECK(fields.size() >= 2, "gather_node_gpus: rank ", rank, " sent a short record");
    if (std::stoi(fields[0]) != comm.node_index()) continue;
    const int local = std::stoi(fields[1]);
    RT_CHECK(local >= 0 && local < comm.local_size(), "gather_node_gpus: rank ", rank,
             " has local rank ", local, " outside [0, ", comm.local_size(), ")");
    node.ranks[size_t(local)] = rank;
    node.visible[size_t(local)].assign(fields.begin() + 2, fields.end());
  }
  return node;
}

std::unique_ptr<backend::Backend> make_rank_backend(const comm::Communicator& comm,
                                                    const TrainConfig& train, int threads,
                                                    int* cuda_device) {
  const backend::Precision precision = backend::parse_precision(train.precision);
  // Every rank gathers (a collective) before any rank can fail on its own.
  const backend::NodeGpus node =
      train.backend == "cuda" ? gather_node_gpus(comm) : backend::NodeGpus{};
  *cuda_device = -1;
  if (train.backend == "cuda" && backend::cuda_device_count() > 0) {
    // One GPU per rank of this node unless train.share_gpus.
    const int device = backend::select_local_device(node, comm.local_rank(), train.share_gpus);
    *cuda_device = device;
    return backend::make_cuda_backend(cuda_options(train, device));
  }
  return backend::make_backend(train.backend, threads, precision,  // says why not
                               backend::parse_conv_weight_grad(train.conv_weight_grad),
                               backend::parse_conv_algorithm(train.conv_algorithm));
}

}  // namespace ringtrain::train

// torch_export.cpp — torch.save's file, written without libtorch: a zip archive (libzip, entries
// stored) of `archive/data.pkl` (a pickle, protocol 2, of an OrderedDict name -> tensor, each
// tensor rebuilt by torch._utils._rebuild_tensor_v2 from a persistent storage id), one
// `archive/data/<key>` entry of raw little-endian bytes per tensor, `archive/version` and
// `archive/byteorder`. What torch.load reads, in the layout torch.save writes.
#include "torch_export.hpp"

#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>

#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::tools {
namespace {

// The pickle opcodes this file uses (Python's pickletools names them).
class Pickle {
 public:
  Pickle() { bytes_ = {'\x80', '\x02'}; }  // PROTO 2
  void global(const std::string& module, const std::string& name) {
    bytes_ += 'c' + module + '\n' + name + '\n';
  }
  void mark() { bytes_ += '('; }
  void tuple() { bytes_ += 't'; }
  void empty_tuple() { bytes_ += ')'; }
  void reduce() { bytes_ += 'R'; }
  void persistent_id() { bytes_ += 'Q'; }  // BINPERSID
  void setitems() { bytes_ += 'u'; }
  void false_() { bytes_ += '\x89'; }  // NEWFALSE
  void stop() { bytes_ += '.'; }
  void text(const std::string& s) {  // BINUNICODE
    bytes_ += 'X';
    le32(uint32_t(s.size()));
    bytes_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < (int64_t(1) << 31)) {  // BININT
      bytes_ += 'J';
      le32(uint32_t(v));
      return;
    }
    bytes_ += '\x8a';  // LONG1: 8 bytes, little-endian two's complement
    bytes_ += char(8);
    for (int i = 0; i < 8; ++i) bytes_ += char((uint64_t(v) >> (8 * i)) & 0xff);
  }
  void ints(const std::vector<int64_t>& values) {
    mark();
    for (int64_t v : values) integer(v);
    tuple();
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void le32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_ += char((v >> (8 * i)) & 0xff);
  }
  std::string bytes_;
};

struct Entry {
  std::string name;
  std::string storage;  // "FloatStorage" or "LongStorage"
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// _rebuild_tensor_v2(storage (persistent id), offset 0, size, stride, requires_grad False,
// backward hooks OrderedDict()).
void pickle_tensor(Pickle& p, const Entry& e, size_t key) {
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.text("storage");
  p.global("torch", e.storage);
  p.text(std::to_string(key));
  p.text("cpu");
  p.integer(numel);
  p.tuple();
  p.persistent_id();
  p.integer(0);
  p.ints(e.shape);
  p.ints(contiguous_strides(e.shape));
  p.false_();
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.tuple();
  p.reduce();
}

std::string state_dict_pickle(const std::vector<Entry>& entries) {
  Pickle p;
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.mark();
  for (size_t i = 0; i < entries.size(); ++i) {
    p.text(entries[i].name);
    pickle_tensor(p, entries[i], i);
  }
  p.setitems();
  p.stop();
  return p.bytes();
}

Entry float_entry(nn::Model& net, const std::string& name) {
  Entry e{name, "FloatStorage", {}, {}};
  const std::vector<float> values = nn::tensor_values(net, name, &e.shape);
  e.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return e;
}

// Every parameter, then every buffer; after a BN layer's running_var, its num_batches_tracked
// (an int64 scalar PyTorch keeps: here the training steps taken). load_state_dict matches by
// name, so the order is free.
std::vector<Entry> state_dict(const nn::ModelFile& file, nn::Model& net) {
  std::vector<Entry> entries;
  for (const nn::Parameter* p : net.parameters()) entries.push_back(float_entry(net, p->name));
  const std::string var = ".running_var";
  for (const nn::NamedBuffer& b : net.buffers()) {
    entries.push_back(float_entry(net, b.name));
    if (b.name.size() <= var.size() ||
        b.name.compare(b.name.size() - var.size(), var.size(), var) != 0)
      continue;
    const int64_t steps = file.global_step();
    entries.push_back({b.name.substr(0, b.name.size() - var.size()) + ".num_batches_tracked",
                       "LongStorage",
                       {},
                       std::string(reinterpret_cast<const char*>(&steps), sizeof steps)});
  }
  return entries;
}

// A zip archive built in memory-owned buffers, committed by zip_close.
class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path) : path_(path) {
    int error = 0;
    zip_ = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
    if (!zip_) {
      zip_error_t e;
      zip_error_init_with_code(&e, error);
      const std::string text = zip_error_strerror(&e);
      zip_error_fini(&e);
      throw InputError(str(path, ": cannot create (", text, ")"));
    }
  }
  ~ZipWriter() {
    if (zip_) zip_discard(zip_);
  }
  void add(const std::string& name, std::string data) {
    blobs_.push_back(std::move(data));
    const std::string& blob = blobs_.back();
    zip_source_t* src = zip_source_buffer(zip_, blob.data(), blob.size(), 0);
    RT_CHECK(src != nullptr, path_, ": ", zip_strerror(zip_));
    const zip_int64_t index = zip_file_add(zip_, name.c_str(), src, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(src);
      throw Error(str(path_, ": cannot add ", name, " (", zip_strerror(zip_), ")"));
    }
    RT_CHECK(zip_set_file_compression(zip_, zip_uint64_t(index), ZIP_CM_STORE, 0) == 0, path_, ": ",
             zip_strerror(zip_));
  }
  void close() {
    if (zip_close(zip_) != 0)
      throw Error(str(path_, ": writing failed (", zip_strerror(zip_), ")"));
    zip_ = nullptr;
  }

 private:
  std::string path_;
  zip_t* zip_ = nullptr;
  std::list<std::string> blobs_;  // alive until zip_close reads them
};

}  // namespace

int write_torch_state_dict(const nn::ModelFile& file, nn::Model& net, const std::string& pt_path) {
  const std::vector<Entry> entries = state_dict(file, net);
  AtomicWrite out(pt_path);
  ZipWriter zip(out.temp_path());
  zip.add("archive/data.pkl", state_dict_pickle(entries));
  for (size_t i = 0; i < entries.size(); ++i)
    zip.add("archive/data/" + std::to_string(i), entries[i].data);
  zip.add("archive/version", "3\n");
  zip.add("archive/byteorder", "little");
  zip.close();
  out.commit();
  return int(entries.size());
}

}  // namespace ringtrain::tools

// h5.hpp — RAII wrapper over the HDF5 C API: files, groups, datasets, attributes, strings.
//
// Every error names the file and the object ("file out/a.h5: dataset /images: ...") and
// carries HDF5's own innermost message. Handles close in destructors, which never throw.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::h5 {

using Dims = std::vector<hsize_t>;

// Maps a C++ element type to its native HDF5 type.
template <typename T>
hid_t native_type();
template <>
inline hid_t native_type<uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
inline hid_t native_type<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
inline hid_t native_type<uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
inline hid_t native_type<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t native_type<uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
inline hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
inline hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept { swap(other); }
  Handle& operator=(Handle&& other) noexcept {
    Handle(std::move(other)).swap(*this);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() noexcept;
  // Gives up ownership without closing; the caller closes (and checks) it.
  hid_t release() noexcept { return std::exchange(id_, -1); }

 private:
  void swap(Handle& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
  }
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Something that carries attributes: a file's root group, a group or a dataset.
class Object {
 public:
  const std::string& file_name() const { return file_; }
  const std::string& path() const { return path_; }
  hid_t id() const { return handle_.get(); }
  // "file F: dataset /x" for error messages.
  std::string where() const;

  bool has_attr(const std::string& name) const;
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value) { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, const std::vector<std::string>& values);
  template <typename T>
  void set_attr(const std::string& name, T value) {
    write_attr(name, native_type<T>(), Dims{}, &value);
  }
  template <typename T>
  void set_attr(const std::string& name, const std::vector<T>& values) {
    write_attr(name, native_type<T>(), Dims{values.size()}, values.data());
  }

  std::string attr_string(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  template <typename T>
  T attr(const std::string& name) const {
    T value{};
    read_attr(name, native_type<T>(), 1, &value);
    return value;
  }
  template <typename T>
  std::vector<T> attr_vector(const std::string& name) const {
    std::vector<T> values(attr_size(name));
    read_attr(name, native_type<T>(), values.size(), values.data());
    return values;
  }

 protected:
  Object(Handle handle, std::string file, std::string path, const char* kind)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)), kind_(kind) {}
  [[noreturn]] void fail(const std::string& what) const;

  Handle handle_;
  std::string file_;
  std::string path_;
  const char* kind_;

 private:
  void write_attr(const std::string& name, hid_t type, const Dims& dims, const void* data);
  void read_attr(const std::string& name, hid_t type, size_t count, void* data) const;
  size_t attr_size(const std::string& name) const;
};

// A dataset: shape, element type checks, whole or row-range (hyperslab along dim 0) I/O.
class Dataset : public Object {
 public:
  Dataset(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path), "dataset") {}

  Dims dims() const;
  // True when the stored element type is T's class, size and sign.
  template <typename T>
  bool holds() const {
    return holds_type(native_type<T>());
  }
  // Throws naming the dataset unless it holds T with the given rank.
  template <typename T>
  void expect(size_t rank, const char* type_name) const {
    expect_type(native_type<T>(), rank, type_name);
  }

  template <typename T>
  std::vector<T> read_all() const {
    size_t count = 1;
    for (hsize_t d : dims()) count *= d;
    std::vector<T> out(count);
    read_rows_raw(native_type<T>(), 0, dims().empty() ? 0 : dims()[0], out.data(), true);
    return out;
  }
  // Reads rows [start, start+count) along dim 0 into out (count * row size elements).
  template <typename T>
  void read_rows(hsize_t start, hsize_t count, T* out) const {
    read_rows_raw(native_type<T>(), start, count, out, false);
  }
  // Reads the listed rows along dim 0 (strictly increasing) into out, in that order: one
  // H5Dread per run of consecutive rows, through one file and one memory dataspace. (One
  // H5Dread over the union of the runs' hyperslabs is 20-30x slower on chunked datasets
  // in HDF5 1.10: it builds a per-chunk selection map for the irregular selection.)
  template <typename T>
  void read_row_list(const std::vector<hsize_t>& rows, T* out) const {
    read_row_list_raw(native_type<T>(), rows, out);
  }
  template <typename T>
  void write_rows(hsize_t start, hsize_t count, const T* data) {
    write_rows_raw(native_type<T>(), start, count, data);
  }
  std::string read_string() const;

 private:
  bool holds_type(hid_t type) const;
  void expect_type(hid_t type, size_t rank, const char* type_name) const;
  void read_rows_raw(hid_t type, hsize_t start, hsize_t count, void* out, bool whole) const;
  void read_row_list_raw(hid_t type, const std::vector<hsize_t>& rows, void* out) const;
  void write_rows_raw(hid_t type, hsize_t start, hsize_t count, const void* data);
};

// A group (the file's root is one).
class Group : public Object {
 public:
  Group(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path), "group") {}

  bool exists(const std::string& name) const;
  Group create_group(const std::string& name);
  Group open_group(const std::string& name) const;
  Dataset open_dataset(const std::string& name) const;
  // Opens a dataset with its own raw-data chunk cache of cache_bytes (HDF5's default: 1 MiB).
  Dataset open_dataset(const std::string& name, size_t chunk_cache_bytes) const;
  // Creates a dataset of the given shape; chunk_rows > 0 chunks it along dim 0.
  template <typename T>
  Dataset create_dataset(const std::string& name, const Dims& dims, hsize_t chunk_rows = 0,
                         bool compress = false) {
    return create_dataset_raw(name, native_type<T>(), dims, chunk_rows, compress);
  }
  // Creates and fills a dataset in one call.
  template <typename T>
  Dataset write(const std::string& name, const Dims& dims, const T* data, hsize_t chunk_rows = 0,
                bool compress = false) {
    Dataset ds = create_dataset<T>(name, dims, chunk_rows, compress);
    if (!dims.empty() && dims[0] > 0) ds.write_rows(0, dims[0], data);
    return ds;
  }
  template <typename T>
  Dataset write(const std::string& name, const std::vector<T>& values) {
    return write(name, Dims{values.size()}, values.data());
  }
  // A scalar variable-length string dataset (h5dump prints it as text).
  Dataset write_string(const std::string& name, const std::string& text);
  // A 1-D dataset of variable-length UTF-8 strings, one per value.
  Dataset write_strings(const std::string& name, const std::vector<std::string>& values);

 private:
  std::string child_path(const std::string& name) const;
  Dataset create_dataset_raw(const std::string& name, hid_t type, const Dims& dims,
                             hsize_t chunk_rows, bool compress);
};

// An open HDF5 file; root() is its "/" group.
class File {
 public:
  static File create(const std::string& path);  // truncates
  static File open_read(const std::string& path);
  static File open_write(const std::string& path);
  // A file that lives in memory only (the core driver without a backing store); name is what
  // errors call it. image() returns its bytes.
  static File create_in_memory(const std::string& name);
  std::vector<char> image();

  Group& root() { return root_; }
  const Group& root() const { return root_; }
  const std::string& name() const { return name_; }
  // Flushes and closes now, reporting errors (the destructor cannot).
  void close();

 private:
  File(Handle file, Group root, std::string name)
      : file_(std::move(file)), root_(std::move(root)), name_(std::move(name)) {}
  Handle file_;
  Group root_;
  std::string name_;
};

// Writes final_path atomically and durably. The file is built in memory (HDF5's core
// driver); commit() writes its image with write_file_atomically (core/atomic_file.hpp: a temp
// file beside final_path, fsynced, renamed into place, the directory fsynced). So a kill at any
// instant leaves either the previous file or the whole new one under final_path, and a full disk is
// an error from our own write(2), naming the file, with the previous file kept (HDF5 itself never
// meets the full disk: a failed H5Fclose there leaves the library in a state that crashes at exit).
// Destroyed without commit, nothing is written. Objects of the file may still be open at
// commit(): the image is taken after a flush.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& final_path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  File& file() { return *file_; }
  Group& root() { return file_->root(); }
  void commit();

 private:
  std::string final_path_;
  std::unique_ptr<File> file_;
};

// Throws InputError naming dir unless a file can be created in it (creating it if needed).
void require_writable_dir(const std::string& dir, const std::string& what);

// True when path exists and is an HDF5 file.
bool is_hdf5(const std::string& path);

// Stops HDF5 printing its error stack from the calling thread (thread-safe HDF5 keeps that
// setting per thread; the main thread's is set at start-up). Call first in any thread
// that uses this wrapper; errors still reach the caller as exceptions.
void quiet_this_thread();

}  // namespace ringtrain::h5

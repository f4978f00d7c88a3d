// h5.cpp — the HDF5 wrapper: every call checked, every error naming its file and object.
#include "ringtrain/io/h5.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringtrain/core/atomic_file.hpp"

namespace ringtrain::h5 {
namespace {

// HDF5 prints its error stack to stderr by default; we report errors ourselves. And it
// closes what is still open at exit, which crashes (HDF5 1.10) when a file's earlier close
// failed (a full disk): every object here is closed by its owner, so that pass is not needed.
struct SilenceHdf5 {
  SilenceHdf5() {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
};
const SilenceHdf5 g_silence;

herr_t take_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err->desc) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

// The innermost message on HDF5's error stack, e.g. "unable to open file".
std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, take_innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "HDF5 call failed" : msg;
}

Handle checked(hid_t id, Handle::Closer closer, const std::string& where, const char* what) {
  if (id < 0) throw Error(str(where, ": ", what, " (", hdf5_message(), ")"));
  return Handle(id, closer);
}

void check(herr_t status, const std::string& where, const char* what) {
  if (status < 0) throw Error(str(where, ": ", what, " (", hdf5_message(), ")"));
}

Handle string_type() {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return Handle(type, H5Tclose);
}

Handle dataspace(const Dims& dims) {
  hid_t space = dims.empty() ? H5Screate(H5S_SCALAR)
                             : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  return checked(space, H5Sclose, "HDF5", "cannot create dataspace");
}

}  // namespace

void Handle::reset() noexcept {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = -1;
}

// ---- Object: attributes -----------------------------------------------------------------

std::string Object::where() const {
  return str("file ", file_, ": ", kind_, " ", path_);
}

void Object::fail(const std::string& what) const {
  throw Error(str(where(), ": ", what));
}

bool Object::has_attr(const std::string& name) const {
  return H5Aexists(id(), name.c_str()) > 0;
}

void Object::write_attr(const std::string& name, hid_t type, const Dims& dims, const void* data) {
  const std::string at = str(where(), ": attribute ", name);
  if (has_attr(name)) check(H5Adelete(id(), name.c_str()), at, "cannot replace");
  Handle space = dataspace(dims);
  Handle attr = checked(H5Acreate2(id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                        H5Aclose, at, "cannot create");
  check(H5Awrite(attr.get(), type, data), at, "cannot write");
}

void Object::set_attr(const std::string& name, const std::string& value) {
  Handle type = string_type();
  const char* text = value.c_str();
  write_attr(name, type.get(), Dims{}, &text);
}

void Object::set_attr(const std::string& name, const std::vector<std::string>& values) {
  Handle type = string_type();
  std::vector<const char*> texts;
  for (const auto& v : values) texts.push_back(v.c_str());
  write_attr(name, type.get(), Dims{values.size()}, texts.data());
}

namespace {
Handle open_attr(const Object& obj, const std::string& name) {
  if (!obj.has_attr(name)) throw Error(str(obj.where(), ": attribute ", name, " is missing"));
  return checked(H5Aopen(obj.id(), name.c_str(), H5P_DEFAULT), H5Aclose,
                 str(obj.where(), ": attribute ", name), "cannot open");
}

size_t element_count(hid_t space) {
  hssize_t n = H5Sget_simple_extent_npoints(space);
  return n < 0 ? 0 : size_t(n);
}
}  // namespace

size_t Object::attr_size(const std::string& name) const {
  Handle attr = open_attr(*this, name);
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  return element_count(space.get());
}

void Object::read_attr(const std::string& name, hid_t type, size_t count, void* data) const {
  Handle attr = open_attr(*this, name);
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  Handle stored(H5Aget_type(attr.get()), H5Tclose);
  const std::string at = str(where(), ": attribute ", name);
  if (H5Tget_class(stored.get()) != H5Tget_class(type))
    throw Error(str(at, " has the wrong type (a string where a number was expected?)"));
  if (element_count(space.get()) != count)
    throw Error(str(at, " has ", element_count(space.get()), " values, expected ", count));
  check(H5Aread(attr.get(), type, data), at, "cannot read");
}

std::vector<std::string> Object::attr_strings(const std::string& name) const {
  Handle attr = open_attr(*this, name);
  Handle stored(H5Aget_type(attr.get()), H5Tclose);
  const std::string at = str(where(), ": attribute ", name);
  if (H5Tget_class(stored.get()) != H5T_STRING) throw Error(str(at, " is not a string"));
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  size_t count = element_count(space.get());
  std::vector<std::string> out;
  if (H5Tis_variable_str(stored.get()) > 0) {
    Handle type = string_type();
    std::vector<char*> texts(count, nullptr);
    check(H5Aread(attr.get(), type.get(), texts.data()), at, "cannot read");
    for (char* t : texts) out.emplace_back(t ? t : "");
    H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, texts.data());
  } else {
    size_t len = H5Tget_size(stored.get());
    std::vector<char> buf(len * count);
    check(H5Aread(attr.get(), stored.get(), buf.data()), at, "cannot read");
    for (size_t i = 0; i < count; ++i) out.emplace_back(&buf[i * len], strnlen(&buf[i * len], len));
  }
  return out;
}

std::string Object::attr_string(const std::string& name) const {
  auto values = attr_strings(name);
  if (values.size() != 1)
    throw Error(
        str(where(), ": attribute ", name, " holds ", values.size(), " strings, expected 1"));
  return values[0];
}

// ---- Dataset ----------------------------------------------------------------------------

Dims Dataset::dims() const {
  Handle space(H5Dget_space(id()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  Dims out(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), out.data(), nullptr);
  return out;
}

bool Dataset::holds_type(hid_t type) const {
  Handle stored(H5Dget_type(id()), H5Tclose);
  return H5Tget_class(stored.get()) == H5Tget_class(type) &&
         H5Tget_size(stored.get()) == H5Tget_size(type) &&
         (H5Tget_class(type) != H5T_INTEGER || H5Tget_sign(stored.get()) == H5Tget_sign(type));
}

void Dataset::expect_type(hid_t type, size_t rank, const char* type_name) const {
  if (!holds_type(type)) fail(str("expected element type ", type_name));
  if (dims().size() != rank) fail(str("expected ", rank, " dimensions, found ", dims().size()));
}

void Dataset::read_rows_raw(hid_t type, hsize_t start, hsize_t count, void* out, bool whole) const {
  Dims shape = dims();
  if (whole || shape.empty()) {
    check(H5Dread(id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), where(), "cannot read");
    return;
  }
  if (start + count > shape[0])
    fail(str("rows ", start, "..", start + count, " are past its ", shape[0], " rows"));
  if (count == 0) return;
  Handle file_space(H5Dget_space(id()), H5Sclose);
  Dims offset(shape.size(), 0), extent = shape;
  offset[0] = start;
  extent[0] = count;
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr, extent.data(),
                            nullptr),
        where(), "cannot select rows");
  Handle mem_space = dataspace(extent);
  check(H5Dread(id(), type, mem_space.get(), file_space.get(), H5P_DEFAULT, out), where(),
        "cannot read rows");
}

void Dataset::read_row_list_raw(hid_t type, const std::vector<hsize_t>& rows, void* out) const {
  if (rows.empty()) return;
  Dims shape = dims();
  if (shape.empty()) fail("is a scalar; cannot read rows");
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i] <= rows[i - 1]) fail("row list is not strictly increasing");
  if (rows.back() >= shape[0]) fail(str("row ", rows.back(), " is past its ", shape[0], " rows"));
  Handle file_space(H5Dget_space(id()), H5Sclose);
  Dims mem_shape = shape;
  mem_shape[0] = rows.size();
  Handle mem_space = dataspace(mem_shape);
  Dims file_offset(shape.size(), 0), mem_offset(shape.size(), 0), extent = shape;
  for (size_t i = 0; i < rows.size();) {
    size_t run = 1;
    while (i + run < rows.size() && rows[i + run] == rows[i] + run) ++run;
    file_offset[0] = rows[i];
    mem_offset[0] = i;
    extent[0] = run;
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, file_offset.data(), nullptr,
                              extent.data(), nullptr),
          where(), "cannot select rows");
    check(H5Sselect_hyperslab(mem_space.get(), H5S_SELECT_SET, mem_offset.data(), nullptr,
                              extent.data(), nullptr),
          where(), "cannot select rows in memory");
    check(H5Dread(id(), type, mem_space.get(), file_space.get(), H5P_DEFAULT, out), where(),
          "cannot read rows");
    i += run;
  }
}

void Dataset::write_rows_raw(hid_t type, hsize_t start, hsize_t count, const void* data) {
  Dims shape = dims();
  if (shape.empty()) {
    check(H5Dwrite(id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), where(), "cannot write");
    return;
  }
  if (start + count > shape[0])
    fail(str("rows ", start, "..", start + count, " are past its ", shape[0], " rows"));
  if (count == 0) return;
  Handle file_space(H5Dget_space(id()), H5Sclose);
  Dims offset(shape.size(), 0), extent = shape;
  offset[0] = start;
  extent[0] = count;
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr, extent.data(),
                            nullptr),
        where(), "cannot select rows");
  Handle mem_space = dataspace(extent);
  check(H5Dwrite(id(), type, mem_space.get(), file_space.get(), H5P_DEFAULT, data), where(),
        "cannot write rows");
}

std::string Dataset::read_string() const {
  Handle stored(H5Dget_type(id()), H5Tclose);
  if (H5Tget_class(stored.get()) != H5T_STRING) fail("is not a string");
  Handle type = string_type();
  char* text = nullptr;
  check(H5Dread(id(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &text), where(), "cannot read");
  std::string out = text ? text : "";
  Handle space(H5Dget_space(id()), H5Sclose);
  H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, &text);
  return out;
}

// ---- Group ------------------------------------------------------------------------------

std::string Group::child_path(const std::string& name) const {
  return path_ == "/" ? "/" + name : path_ + "/" + name;
}

bool Group::exists(const std::string& name) const {
  return H5Lexists(id(), name.c_str(), H5P_DEFAULT) > 0;
}

Group Group::create_group(const std::string& name) {
  Handle g = checked(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Gclose, str("file ", file_, ": group ", child_path(name)), "cannot create");
  return Group(std::move(g), file_, child_path(name));
}

Group Group::open_group(const std::string& name) const {
  if (!exists(name)) throw Error(str("file ", file_, ": group ", child_path(name), " is missing"));
  Handle g = checked(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), H5Gclose,
                     str("file ", file_, ": group ", child_path(name)), "cannot open");
  return Group(std::move(g), file_, child_path(name));
}

Dataset Group::open_dataset(const std::string& name) const {
  const std::string at = str("file ", file_, ": dataset ", child_path(name));
  if (!exists(name)) throw Error(str(at, " is missing"));
  Handle d = checked(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, at, "cannot open");
  return Dataset(std::move(d), file_, child_path(name));
}

Dataset Group::open_dataset(const std::string& name, size_t chunk_cache_bytes) const {
  const std::string at = str("file ", file_, ": dataset ", child_path(name));
  if (!exists(name)) throw Error(str(at, " is missing"));
  Handle access(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  // A prime slot count well above the chunks the cache can hold keeps collisions rare.
  check(H5Pset_chunk_cache(access.get(), 100003, chunk_cache_bytes, 1.0), at,
        "cannot set the chunk cache");
  Handle d = checked(H5Dopen2(id(), name.c_str(), access.get()), H5Dclose, at, "cannot open");
  return Dataset(std::move(d), file_, child_path(name));
}

Dataset Group::create_dataset_raw(const std::string& name, hid_t type, const Dims& dims,
                                  hsize_t chunk_rows, bool compress) {
  const std::string at = str("file ", file_, ": dataset ", child_path(name));
  Handle space = dataspace(dims);
  Handle props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunk_rows > 0 && !dims.empty() && dims[0] > 0) {
    Dims chunk = dims;
    chunk[0] = std::min<hsize_t>(chunk_rows, dims[0]);
    check(H5Pset_chunk(props.get(), int(chunk.size()), chunk.data()), at, "cannot set chunks");
    if (compress) check(H5Pset_deflate(props.get(), 4), at, "cannot set compression");
  }
  Handle d = checked(
      H5Dcreate2(id(), name.c_str(), type, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
      H5Dclose, at, "cannot create");
  return Dataset(std::move(d), file_, child_path(name));
}

Dataset Group::write_string(const std::string& name, const std::string& text) {
  const std::string at = str("file ", file_, ": dataset ", child_path(name));
  Handle type = string_type();
  Handle space = dataspace(Dims{});
  Handle d = checked(H5Dcreate2(id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose, at, "cannot create");
  const char* ptr = text.c_str();
  check(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &ptr), at, "cannot write");
  return Dataset(std::move(d), file_, child_path(name));
}

Dataset Group::write_strings(const std::string& name, const std::vector<std::string>& values) {
  const std::string at = str("file ", file_, ": dataset ", child_path(name));
  Handle type = string_type();
  Handle space = dataspace(Dims{values.size()});
  Handle d = checked(H5Dcreate2(id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose, at, "cannot create");
  std::vector<const char*> texts;
  for (const auto& v : values) texts.push_back(v.c_str());
  if (!texts.empty())
    check(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, texts.data()), at,
          "cannot write");
  return Dataset(std::move(d), file_, child_path(name));
}

// ---- File -------------------------------------------------------------------------------

File File::create(const std::string& path) {
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw Error(str("file ", path, ": cannot create (", hdf5_message(), ")"));
  Handle file(id, H5Fclose);
  Handle root = checked(H5Gopen2(id, "/", H5P_DEFAULT), H5Gclose, "file " + path, "no root");
  return File(std::move(file), Group(std::move(root), path, "/"), path);
}

File File::open_read(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0)
    throw Error(str("file ", path, ": cannot open (", std::strerror(errno), ")"));
  if (!is_hdf5(path)) throw Error(str("file ", path, ": is not an HDF5 file"));
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw Error(str("file ", path, ": cannot open (", hdf5_message(), ")"));
  Handle file(id, H5Fclose);
  Handle root = checked(H5Gopen2(id, "/", H5P_DEFAULT), H5Gclose, "file " + path, "no root");
  return File(std::move(file), Group(std::move(root), path, "/"), path);
}

File File::open_write(const std::string& path) {
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) throw Error(str("file ", path, ": cannot open for writing (", hdf5_message(), ")"));
  Handle file(id, H5Fclose);
  Handle root = checked(H5Gopen2(id, "/", H5P_DEFAULT), H5Gclose, "file " + path, "no root");
  return File(std::move(file), Group(std::move(root), path, "/"), path);
}

File File::create_in_memory(const std::string& name) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_fapl_core(fapl.get(), size_t(1) << 20, /*backing_store=*/0), "file " + name,
        "cannot set up an in-memory file");
  hid_t id = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) throw Error(str("file ", name, ": cannot create in memory (", hdf5_message(), ")"));
  Handle file(id, H5Fclose);
  Handle root = checked(H5Gopen2(id, "/", H5P_DEFAULT), H5Gclose, "file " + name, "no root");
  return File(std::move(file), Group(std::move(root), name, "/"), name);
}

std::vector<char> File::image() {
  check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "file " + name_, "cannot flush");
  ssize_t size = H5Fget_file_image(file_.get(), nullptr, 0);
  if (size < 0) check(-1, "file " + name_, "cannot take the file's image");
  std::vector<char> bytes(static_cast<size_t>(size));
  if (H5Fget_file_image(file_.get(), bytes.data(), bytes.size()) != size)
    check(-1, "file " + name_, "cannot take the file's image");
  return bytes;
}

void File::close() {
  if (!file_.valid()) return;
  root_ = Group(Handle(), name_, "/");
  check(H5Fclose(file_.release()), "file " + name_, "cannot close (disk full?)");
}

bool is_hdf5(const std::string& path) {
  return H5Fis_hdf5(path.c_str()) > 0;
}

void quiet_this_thread() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// ---- AtomicFile -------------------------------------------------------------------------

AtomicFile::AtomicFile(const std::string& final_path) : final_path_(final_path) {
  file_ = std::make_unique<File>(File::create_in_memory(final_path));
}

AtomicFile::~AtomicFile() = default;

void AtomicFile::commit() {
  RT_CHECK(file_, "AtomicFile ", final_path_, ": committed twice");
  const std::vector<char> bytes = file_->image();
  file_.reset();
  write_file_atomically(final_path_, bytes.data(), bytes.size());
}

void require_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(str(what, " ", dir, ": cannot create directory (", ec.message(), ")"));
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(
        str(what, " ", dir, ": directory is not writable (", std::strerror(errno), ")"));
}

}  // namespace ringtrain::h5

#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace kvgate {
namespace {

// Opens `path` for reading and checks it is not a directory; returns the descriptor and its stat.
int open_input(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input_error(path + ": cannot open: " + std::strerror(errno));
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_environment_error(path + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_input_error(path + ": is a directory, expected a file");
  }
  return fd;
}

}  // namespace

namespace {

std::string bytes_text(size_t n) {
  if (n >= (size_t{1} << 30) && n % (size_t{1} << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

[[noreturn]] void too_large(const std::string& path, const std::string& what, size_t max_bytes) {
  throw_input_error(path + ": " + what + " is larger than the " + bytes_text(max_bytes) +
                    " kvgate reads from such a file (README, \"Input limits\")");
}

}  // namespace

std::string read_whole_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  const int fd = open_input(path, st);
  const bool regular = S_ISREG(st.st_mode);
  if (!regular && !S_ISFIFO(st.st_mode)) {
    ::close(fd);
    throw_input_error(path + ": not a regular file or a pipe (a device or socket is never read as input)");
  }
  if (regular && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    too_large(path, "the file (" + std::to_string(st.st_size) + " bytes)", max_bytes);
  }
  std::string bytes;
  if (regular) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_input_error(path + ": cannot read: " + std::strerror(err));
    }
    if (bytes.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      too_large(path, regular ? "the file (it grew while read)" : "what the pipe delivered", max_bytes);
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

namespace {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

[[noreturn]] void throw_write_error(const std::string& path, int err) {
  const std::string message = path + ": cannot write: " + std::strerror(err);
  if (err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM || err == EISDIR || err == EROFS ||
      err == ENAMETOOLONG || err == ELOOP || err == ETXTBSY)
    throw_input_error(message);
  throw_environment_error(message);
}

}  // namespace

void write_output_file(const std::string& path, std::string_view bytes) {
  if (path.empty()) throw_input_error("an output path is empty");
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw_input_error(path + ": cannot write: is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw_write_error(path, errno);
    const bool ok = write_all(fd, bytes);
    const int err = errno;
    ::close(fd);
    if (!ok) throw_write_error(path, err);
    return;
  }
  // Probe the target itself first, so a read-only file in a writable directory is refused as
  // it would be without the rename.
  if (exists && ::access(path.c_str(), W_OK) != 0) throw_write_error(path, errno);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(path, errno);
  bool ok = write_all(fd, bytes);
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw_write_error(path, err);
  }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  struct stat st {};
  int fd = open_input(path, st);
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input_error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_environment_error(path + ": cannot map: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvgate

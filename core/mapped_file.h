#pragma once
// Whole-file input. Model files are hundreds of MB: mapping them keeps the weights out of our
// heap and lets the OS share pages between runs. Small inputs read once (JSON, JSONL, text) are
// read into a string. Both name the path in every error: a missing file, a directory where a
// file was expected or a special file is bad input (exit 2), never an internal error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws input error (missing) / environment error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// How much of an input file kvgate reads (README, "Input limits"): suites, gate policies,
// endpoints files, chat messages and KV overhead factors are small by nature; eval sets and
// sessions, and the text perplexity and tokenize read, are data. Model files and shape traces
// are mapped (MappedFile), not read into memory, and have no limit but being regular files.
inline constexpr size_t kMaxConfigFileBytes = size_t{64} << 20;  // 64 MiB
inline constexpr size_t kMaxDataFileBytes = size_t{2} << 30;     // 2 GiB

// The bytes of `path`: a regular file, or a pipe (/dev/stdin fed by another program) read until
// it ends. A device (/dev/zero, a terminal), a socket or a directory is bad input naming the path,
// and so is a file of more than `max_bytes`, or a pipe that goes on past them: it is read no
// further. Empty is allowed: what an empty input means is the caller's to say.
std::string read_whole_file(const std::string& path, size_t max_bytes);

// Writes `bytes` as the whole of `path` (an output the user named: a report, a trace, a
// tensor). A regular file is written beside it and renamed over it, so an interrupted write
// never leaves half a file; a device or pipe (/dev/stdout) is written in place. A path that
// cannot be created (no such directory, no permission, a directory, a read-only file system) is
// the user's to fix: input error (exit 2) naming it. A failure while writing (disk full, I/O)
// is an environment error (exit 3).
void write_output_file(const std::string& path, std::string_view bytes);

}  // namespace kvgate

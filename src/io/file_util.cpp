#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace parity::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes the descriptor and removes the temp file unless the rename went through.
class TempFile {
 public:
  TempFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  int close_fd() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

}  // namespace

std::string read_file_bytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path + ": " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error("cannot read " + path + ": " + errno_text(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read " + path + ": is a directory");
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw Error("cannot read " + path + ": " + errno_text(err));
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  // pid + counter keeps concurrent writers (threads or processes) off each other's temp files.
  static std::atomic<unsigned long> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw Error("cannot write " + path + ": " + errno_text(errno));
  TempFile guard(tmp, fd);
  for (std::string_view piece : pieces) {
    const char* p = piece.data();
    std::size_t left = piece.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error("cannot write " + path + ": " + errno_text(errno));
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd) != 0) throw Error("cannot write " + path + ": " + errno_text(errno));
  if (guard.close_fd() != 0) throw Error("cannot write " + path + ": " + errno_text(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot write " + path + ": " + errno_text(errno));
  guard.commit();
}

}  // namespace parity::io

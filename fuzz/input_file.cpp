#include "input_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace parity::fuzz {

std::string input_file(const uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("parity-fuzz-input", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, 0) != 0) throw std::runtime_error(std::string("ftruncate: ") + std::strerror(errno));
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) throw std::runtime_error(std::string("pwrite: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace parity::fuzz

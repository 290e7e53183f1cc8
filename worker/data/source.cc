// Memory-mapped token files and the seeded synthetic source (see source.h).
#include "worker/data/source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sys/mman.h>
#include <sys/stat.h>

#include "common/random.h"
#include "worker/data/order.h"

namespace orrery::data {

StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path, int token_bytes,
                                                     int64_t seq_len, int64_t vocab_size) {
  if (token_bytes != 2 && token_bytes != 4)
    return InvalidArgumentError("token width must be 2 or 4 bytes");
  if (seq_len < 1) return InvalidArgumentError("seq_len must be >= 1");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open token file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return InternalError("cannot stat token file " + path);
  }
  std::unique_ptr<TokenFile> f(new TokenFile());
  f->path_ = path;
  f->token_bytes_ = token_bytes;
  f->seq_len_ = seq_len;
  f->mapped_ = static_cast<size_t>(st.st_size);
  if (f->mapped_ % static_cast<size_t>(token_bytes) != 0) {
    ::close(fd);
    return DataLossError("token file " + path + " size is not a multiple of " +
                         std::to_string(token_bytes));
  }
  f->num_tokens_ = static_cast<int64_t>(f->mapped_) / token_bytes;
  if (f->mapped_ > 0) {
    void* p = ::mmap(nullptr, f->mapped_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return InternalError("cannot map token file " + path + ": " + std::strerror(errno));
    }
    f->data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  if (f->num_tokens_ < seq_len + 1) {
    return FailedPreconditionError(
        "token file " + path + " holds " + std::to_string(f->num_tokens_) +
        " tokens, fewer than one sample of " + std::to_string(seq_len + 1));
  }
  if (vocab_size == 0) {
    int32_t mx = 0;
    for (int64_t i = 0; i < f->num_tokens_; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, f->data_ + i * token_bytes, static_cast<size_t>(token_bytes));
      mx = std::max(mx, static_cast<int32_t>(v));
    }
    vocab_size = static_cast<int64_t>(mx) + 1;
  }
  f->vocab_size_ = vocab_size;
  return f;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_);
}

int64_t TokenFile::NumSamples() const { return (num_tokens_ - 1) / seq_len_; }

Status TokenFile::Read(int64_t index, int32_t* out) const {
  if (index < 0 || index >= NumSamples()) {
    return OutOfRangeError("sample " + std::to_string(index) + " outside [0, " +
                           std::to_string(NumSamples()) + ") of " + path_);
  }
  const unsigned char* p = data_ + index * seq_len_ * token_bytes_;
  for (int64_t i = 0; i <= seq_len_; ++i) {
    if (token_bytes_ == 2) {
      uint16_t v;
      std::memcpy(&v, p + i * 2, 2);
      out[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, p + i * 4, 4);
      out[i] = static_cast<int32_t>(v);
    }
  }
  return OkStatus();
}

SyntheticSource::SyntheticSource(uint64_t seed, int64_t num_samples, int64_t seq_len,
                                 int64_t vocab_size)
    : seed_(seed), num_samples_(num_samples), seq_len_(seq_len), vocab_size_(vocab_size) {}

Status SyntheticSource::Read(int64_t index, int32_t* out) const {
  if (index < 0 || index >= num_samples_)
    return OutOfRangeError("synthetic sample " + std::to_string(index));
  uint64_t state = seed_ ^ (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull);
  const auto v = static_cast<uint64_t>(vocab_size_);
  uint64_t tok = SplitMix64Next(state) % v;
  // A fixed affine rule (multiplier coprime with most vocabularies) plus rare noise:
  // a model can learn it, so a loss that falls is a real signal.
  for (int64_t i = 0; i <= seq_len_; ++i) {
    out[i] = static_cast<int32_t>(tok);
    const uint64_t r = SplitMix64Next(state);
    tok = (r % 16 == 0) ? (r >> 8) % v : (tok * 5 + 3) % v;
  }
  return OkStatus();
}

}  // namespace orrery::data

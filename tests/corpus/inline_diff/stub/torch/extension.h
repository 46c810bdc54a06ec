// A stand-in for torch/extension.h, for compiling the differential corpus's host code with nvcc and
// g++ in a second instead of half a minute: the same standard headers torch brings, and a Tensor whose
// metadata methods have torch's signatures (int64_t size(int64_t) const, ...). Cases whose verdict needs
// torch's own declarations (argument-dependent lookup into at::) say `// headers: torch`.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace at {
class Tensor {
 public:
  std::vector<int64_t> shape_;
  int64_t size(int64_t d) const { return shape_[d < 0 ? d + (int64_t)shape_.size() : d]; }
  int64_t dim() const { return (int64_t)shape_.size(); }
  int64_t numel() const { int64_t n = 1; for (int64_t s : shape_) n *= s; return n; }
  int64_t stride(int64_t d) const { int64_t n = 1; for (int64_t k = d + 1; k < dim(); ++k) n *= shape_[k]; return n; }
  std::vector<int64_t> sizes() const { return shape_; }
};
}  // namespace at
namespace torch { using at::Tensor; }
#define TORCH_CHECK(cond, ...) do { if (!(cond)) throw std::runtime_error("TORCH_CHECK failed"); } while (0)

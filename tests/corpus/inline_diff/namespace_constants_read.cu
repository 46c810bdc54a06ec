// what: namespace-scope constants are read
// verdict: value 511
#include <torch/extension.h>
constexpr int64_t kBig = 1LL << 40;
const unsigned kMask = 0xFFu;
int64_t f(torch::Tensor x) {
    return (kBig >> 32) + kMask;
}

// what: unsigned long long wraps modulo 2^64
// verdict: value 0
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    uint64_t a = 1ULL << 63;
    return (int64_t)(a * 2);
}

// what: Tensor::size returns int64_t: auto is 64-bit
// verdict: value 3000000000
// shape: 3 5
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    auto n = x.size(0);
    return n * 1000000000;
}

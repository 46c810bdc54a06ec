// what: 4000000000u fits unsigned int, so it is one, and the product wraps at 32 bits
// verdict: value 3705032704
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    auto v = 4000000000u;
    return v * 2;
}

// what: ~0u is unsigned
// verdict: value 268435455
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return ~0u >> 4;
}

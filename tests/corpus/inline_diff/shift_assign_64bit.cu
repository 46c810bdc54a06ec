// what: a 64-bit shift
// verdict: value 1099511627776
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t v = 1;
    v <<= 40;
    return v;
}

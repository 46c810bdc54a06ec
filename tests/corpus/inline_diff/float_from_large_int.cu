// what: float has 24 bits of mantissa
// verdict: value 16777216
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    float v = 16777217;
    return (int64_t)v;
}

// what: -7 as unsigned, halved
// verdict: value 2147483644
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    unsigned a = -7;
    return a / 2;
}

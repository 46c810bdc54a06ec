// what: a decimal literal that does not fit int is long
// verdict: value 6000000000
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    auto v = 3000000000;
    return v * 2;
}

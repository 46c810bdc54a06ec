// what: lambdas
// verdict: refused lambda outside AT_DISPATCH
// native: 6
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    auto g = [](int64_t v) { return v * 2; };
    return g(x.size(0));
}

// what: nor a constexpr
// verdict: error expression must be a modifiable lvalue
#include <torch/extension.h>
constexpr int M = 4;
int64_t f(torch::Tensor x) {
    M += 1;
    return M;
}

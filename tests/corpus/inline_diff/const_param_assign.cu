// what: a const parameter is not assigned
// verdict: error expression must be a modifiable lvalue
#include <torch/extension.h>
int64_t g(const int n) {
    n = 3;
    return n;
}
int64_t f(torch::Tensor x) {
    return g(1);
}

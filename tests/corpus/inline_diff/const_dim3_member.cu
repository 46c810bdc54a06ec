// what: a const dim3's members are const
// verdict: error expression must be a modifiable lvalue
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    const dim3 g(1);
    g.x = 2;
    return g.x;
}

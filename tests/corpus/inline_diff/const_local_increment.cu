// what: a const local is not incremented
// verdict: error expression must be a modifiable lvalue
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    const int k = 1;
    k++;
    return k;
}

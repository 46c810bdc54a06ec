// what: a namespace-scope const is not assignable (issue 38, family 8)
// verdict: error expression must be a modifiable lvalue
#include <torch/extension.h>
const int N = 4;
int64_t f(torch::Tensor x) {
    N = 5;
    return N;
}

// what: a host function called with too few arguments
// verdict: error too few arguments in function call
#include <torch/extension.h>
int64_t g(int a, int b) { return a + b; }
int64_t f(torch::Tensor x) {
    return g(1);
}

// what: function pointers
// verdict: refused the function g used as a value
// native: 2
#include <torch/extension.h>
int64_t g(int64_t v) { return v + 1; }
int64_t f(torch::Tensor x) {
    auto h = g;
    return h(1);
}

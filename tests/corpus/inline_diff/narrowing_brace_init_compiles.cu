// what: narrowing in braces is only a warning from nvcc for a value it cannot see
// verdict: value -1294967296
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int n{x.size(0) * 1000000000};
    return n;
}

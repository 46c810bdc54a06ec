// what: both arms of ?: convert to their common type (unsigned): -1 becomes 4294967295
// verdict: value 1
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = -1;
    return (a < 0 ? a : 0u) > 0;
}

// what: right shift of a negative int is arithmetic
// verdict: value -4
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int v = -16;
    return v >> 2;
}

// what: g++'s words for % on double
// verdict: error invalid operands of types
// file: cpp
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    double d = 5.5;
    return d % 2;
}

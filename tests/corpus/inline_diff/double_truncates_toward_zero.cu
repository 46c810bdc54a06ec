// what: a floating to integer conversion truncates toward zero
// verdict: value -2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    double d = -2.7;
    return (int)d;
}

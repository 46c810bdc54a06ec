// what: dim3 is a value: writing the copy leaves the original
// verdict: value 1
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    dim3 a(1);
    dim3 b = a;
    b.x = 5;
    return a.x;
}

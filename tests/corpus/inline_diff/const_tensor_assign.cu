// what: a const Tensor is not assigned (Tensor::operator= is not const)
// verdict: error no operator "=" matches these operands
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    torch::Tensor y = x;
    const torch::Tensor z = y;
    z = y;
    return 1;
}

// what: C++20 defines a signed left shift as modular
// verdict: value -2147483648
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int v = 3;
    return v << 31;
}

// what: long holds every unsigned int: the product is a long
// verdict: value -6
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    long a = -3;
    unsigned b = 2;
    return a * b;
}

// what: CUDA's min(int, unsigned int) compares as unsigned
// verdict: value 2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = -1;
    unsigned b = 2;
    return min(a, b);
}

// what: a long converted to int keeps the low 32 bits
// verdict: value -1294967296
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t big = 3000000000LL;
    int n = big;
    return n;
}

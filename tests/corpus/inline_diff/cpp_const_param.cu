// what: g++'s words for a parameter
// verdict: error assignment of read-only parameter ‘n’
// file: cpp
#include <torch/extension.h>
int64_t g(const int n) {
    n = 3;
    return n;
}
int64_t f(torch::Tensor x) {
    return g(1);
}

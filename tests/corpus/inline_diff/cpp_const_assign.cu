// what: g++'s words
// verdict: error assignment of read-only variable ‘N’
// file: cpp
#include <torch/extension.h>
const int N = 4;
int64_t f(torch::Tensor x) {
    N = 5;
    return N;
}

// what: g++'s words for ++
// verdict: error increment of read-only variable ‘k’
// file: cpp
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    const int k = 1;
    k++;
    return k;
}

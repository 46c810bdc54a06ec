// what: long vs unsigned long: both unsigned long
// verdict: value 2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t a = -1;
    uint64_t b = 1;
    return a < b ? 1 : 2;
}

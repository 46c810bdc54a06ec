// what: an unsigned shift into the top bit
// verdict: value 2147483648
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    unsigned one = 1;
    return one << 31;
}

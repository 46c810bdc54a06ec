// what: long long cannot hold every unsigned long: the sum is unsigned long long
// verdict: value 1
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    long long a = -1;
    unsigned long b = 0;
    return (a + b) > 0;
}

// what: -1 converts to unsigned in a mixed comparison
// verdict: value 0
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = -1;
    unsigned b = 1;
    return a < b;
}

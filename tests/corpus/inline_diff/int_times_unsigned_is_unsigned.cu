// what: int times unsigned int is unsigned int
// verdict: value 4294967290
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = -3;
    unsigned b = 2;
    return a * b;
}
